"""TRL adapter: multi-turn rollout_func, per-token G2PO advantages inside a real GRPOTrainer step, TRL contract.

A tiny randomly initialised Llama with a character tokenizer (built in memory, offline) stands in for an LM: the
adapter's job is bookkeeping (spans, masks, sampling log-probs, advantage placement), which a tiny model exercises
exactly as SmolLM2 would, in seconds.
"""

from __future__ import annotations

import os
import re
import string
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agentmill.envs.keydoor import KeyDoorConfig, generate_layout, make_keydoor
from agentmill.methods.g2po import G2POConfig, g2po_advantages
from agentmill.methods.g2po.adapters import trl_adapter
from agentmill.methods.g2po.keys import FieldsKey

PYPROJECT = Path(__file__).resolve().parents[4] / "pyproject.toml"
CFG = KeyDoorConfig(n_rooms=3, n_locks=1, max_steps=20)
LAYOUTS = {f"keydoor-{s}": generate_layout(s, CFG) for s in (4, 6)}


@pytest.fixture(scope="module")
def tiny():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=2048, pad_token_id=0, eos_token_id=1,
                                         bos_token_id=1))
    return model, tok


def _env(prompt: str):
    return make_keydoor(layout=LAYOUTS[prompt], config=CFG)


def _render(obs, info, turn):
    return (f"Open the chest.\n{obs}\n> " if turn == 0 else f"\n{obs}\n> ")


def _fake_trainer(model, tok, step=0):
    return SimpleNamespace(model=model, processing_class=tok, state=SimpleNamespace(global_step=step),
                           args=SimpleNamespace(temperature=1.0, max_completion_length=400, use_vllm=False))


def test_rollout_func_interleaves_actions_and_feedback_with_exact_sampling_logprobs(tiny) -> None:
    model, tok = tiny
    fn = trl_adapter.make_rollout_func(_env, _render, max_steps=3, max_new_tokens=6, seed=1)
    out = fn(["keydoor-4", "keydoor-6"], _fake_trainer(model, tok))
    again = fn(["keydoor-4", "keydoor-6"], _fake_trainer(model, tok))
    assert out["completion_ids"] == again["completion_ids"]  # seeded per (step, completion)
    for pid, cid, lps, mask, steps in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"],
                                          out["env_mask"], out["agentmill_steps"]):
        assert len(cid) == len(lps) == len(mask) and 1 <= len(steps) <= 3
        action_pos = [p for s in steps for p in range(*s["span"])]
        assert [i for i, m in enumerate(mask) if m] == action_pos  # feedback tokens are masked out
        assert all("oracle" not in s["info"] and "oracle" not in s["next_info"] for s in steps)
        assert steps[-1]["end"] in (1, 2) and all(s["end"] == 0 for s in steps[:-1])
        with torch.no_grad():
            logits = model(torch.tensor([pid + cid])).logits[0].float()
        ref = torch.log_softmax(logits, -1)
        for p in action_pos:
            assert abs(float(ref[len(pid) + p - 1, cid[p]]) - lps[p]) < 1e-4
        assert all(lps[i] == 0.0 for i, m in enumerate(mask) if not m)


def test_steps_to_table_and_per_token_placement() -> None:
    def row(t, obs, nobs, r, end, span):
        return dict(t=t, obs=obs, next_obs=nobs, info={}, next_info={}, action="a", reward=r, end=end, span=span)
    steps = [[row(0, "S", "A", 0.0, 0, [0, 2]), row(1, "A", "W", 1.0, 1, [5, 7])] + [],
             [row(0, "S", "C", 0.0, 2, [0, 3])]]
    steps[0][-1]["won"] = True
    table, owner, spans = trl_adapter.steps_to_table(steps, num_generations=2)
    assert table.group_id.tolist() == ["g0"] * 3 and table.success.tolist() == [True, True, False]
    adv = trl_adapter.per_token_advantages(np.array([0.5, 1.0, -2.0]), owner, spans, (2, 8))
    assert adv.tolist() == [[0.5, 0.5, 0, 0, 0, 1, 1, 0], [-2, -2, -2, 0, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="whole groups"):
        trl_adapter.steps_to_table(steps, num_generations=3)
    with pytest.raises(ValueError, match="exceeds"):
        trl_adapter.per_token_advantages(np.array([0.5, 1.0, -2.0]), owner, spans, (2, 6))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*same nonzero reward on every step")  # a random tiny LM: -0.1 invalid each step
def test_real_grpo_trainer_step_uses_per_token_g2po_advantages(tiny, tmp_path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tok = tiny
    before = [p.detach().clone() for p in model.parameters()]
    seen = {}
    base = trl_adapter.g2po_trainer_class()

    class Spy(base):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen["adv"] = out["advantages"].clone()
            seen["steps"] = [x["agentmill_steps"] for x in inputs]
            return out

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1,
                      max_completion_length=300, learning_rate=1e-2, logging_steps=1, report_to=[], use_cpu=True,
                      save_strategy="no", bf16=False, temperature=1.0)
    ds = Dataset.from_list([{"prompt": "keydoor-4"}, {"prompt": "keydoor-6"}])
    key = FieldsKey(("description", "inventory"))
    trainer = Spy(model=model, processing_class=tok, reward_funcs=trl_adapter.episode_return, args=args,
                  train_dataset=ds, key_fn=key,
                  rollout_func=trl_adapter.make_rollout_func(_env, _render, max_steps=4, max_new_tokens=8))
    trainer.train()
    assert trainer.state.global_step == 1
    adv = seen["adv"].numpy()
    table, owner, spans = trl_adapter.steps_to_table(seen["steps"], 4)
    expected = g2po_advantages(table, key, G2POConfig()).advantages
    assert adv.ndim == 2 and adv.shape[0] == 4
    np.testing.assert_allclose(adv, trl_adapter.per_token_advantages(expected, owner, spans, adv.shape), atol=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # parameters moved
    assert any("g2po/merge_rate" in entry for entry in trainer.state.log_history)  # logged with TRL's metrics


def test_trl_contract(monkeypatch) -> None:
    import trl
    from trl import GRPOTrainer

    assert trl_adapter.check_trl() == trl.__version__
    monkeypatch.delattr(GRPOTrainer, "_compute_loss")
    with pytest.raises(RuntimeError, match="TRL internals changed: GRPOTrainer._compute_loss missing"):
        trl_adapter.check_trl()


def _pyproject_trl_requirement() -> str:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["trl"]
    (req,) = declared
    assert req.startswith("trl") and req[3:4] in "<>=!~"
    return req[3:]


# (version string, accepted); edges of ">=1.16,<1.17" and what lies just outside, checkable by hand
GATE_EDGES = [("1.16.0", True), ("1.16.9", True), ("1.16.1.dev0", True), ("1.16.0+local", True),
              ("1.15.2", False), ("1.16.0rc1", False), ("1.17.0.dev0", False), ("1.17.0", False), ("2.0.0", False),
              ("0.26.0", False), ("not-a-version", False)]


def test_version_gate_matches_the_pyproject_trl_extra_at_its_edges(monkeypatch) -> None:
    """Issue 20, item 8: pyproject admitted ``trl>=0.26,<2`` while the adapter refused all but 1.16.x, so
    ``pip install 'agentmill[trl]'`` could install a TRL the adapter rejects. Now the extra's specifier is the
    adapter's ``TRL_REQUIREMENT``, and the gate accepts exactly the versions that specifier admits."""
    import trl
    from packaging.specifiers import SpecifierSet

    assert _pyproject_trl_requirement() == trl_adapter.TRL_REQUIREMENT
    assert SpecifierSet(trl_adapter.TRL_REQUIREMENT).contains(trl.__version__)  # the installed TRL is in range
    spec = SpecifierSet(trl_adapter.TRL_REQUIREMENT, prereleases=True)
    for version, accepted in GATE_EDGES:
        monkeypatch.setattr(trl, "__version__", version)
        if accepted:
            assert spec.contains(version) and trl_adapter.check_trl() == version
        else:
            with pytest.raises(RuntimeError, match=rf"unsupported TRL version {re.escape(version)}: .*"
                                                   rf"trl{re.escape(trl_adapter.TRL_REQUIREMENT)}"):
                trl_adapter.check_trl()
