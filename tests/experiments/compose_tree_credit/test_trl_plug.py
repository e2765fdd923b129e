"""The TRL face of the composition: tree groups through G2PO's existing ``G2POGRPOTrainer``.

A tiny randomly initialised Llama with a character tokenizer (built in memory, offline: no download) stands in for
the trainer's model; a tabular softmax policy acts, so the rollouts are KeyDoor trees grown by InfoTree's sampler.
"""

from __future__ import annotations

import os
import string
from types import SimpleNamespace

import numpy as np
import pytest

from agentmill.envs.keydoor import KeyDoorConfig, generate_layout, make_keydoor
from agentmill.envs.policies import SoftmaxTablePolicy
from agentmill.envs.rollout import EpsilonOraclePolicy
from agentmill.experiments.compose_tree_credit.adapter import KEY, tree_rollout_func
from agentmill.methods.g2po import G2POConfig, g2po_advantages

CFG = KeyDoorConfig(n_rooms=3, n_locks=1, max_steps=20)
LAYOUTS = {f"keydoor-{s}": generate_layout(s, CFG) for s in (4, 6)}


def _env(prompt: str):
    return make_keydoor(layout=LAYOUTS[prompt], config=CFG)


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("transformers")
    import torch
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
                                         max_position_embeddings=4096, pad_token_id=0, eos_token_id=1,
                                         bos_token_id=1))
    return model, tok


class CharTokenizer:
    """The slice of a tokenizer ``tree_rollout_func`` uses: one id per character (no transformers import)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        return SimpleNamespace(input_ids=[ord(c) for c in text])

    def decode(self, ids) -> str:
        return "".join(chr(i) for i in ids)


def test_tree_rollout_func_gives_g2po_adapter_tree_groups() -> None:
    from agentmill.methods.g2po.adapters import trl_adapter

    tok = CharTokenizer()
    trainer = SimpleNamespace(processing_class=tok, num_generations=4, state=SimpleNamespace(global_step=0),
                              args=SimpleNamespace(use_vllm=False))
    fn = tree_rollout_func(_env, lambda tr: SoftmaxTablePolicy(), max_steps=6, budget=24, seed=3)
    out = fn(["keydoor-4"] * 4 + ["keydoor-6"] * 4, trainer)
    assert len(out["completion_ids"]) == 8
    for ids, mask, steps in zip(out["completion_ids"], out["env_mask"], out["agentmill_steps"]):
        assert len(ids) == len(mask) == sum(s["span"][1] - s["span"][0] for s in steps)  # no feedback rendered
        assert tok.decode(ids) == "".join(s["action"] + "\n" for s in steps)
    table, owner, spans = trl_adapter.steps_to_table(out["agentmill_steps"], 4)
    assert len(set(table.group_id.tolist())) == 2
    # leaves of one tree share prefixes: some row of a later leaf repeats an earlier leaf's first rows exactly
    first = out["agentmill_steps"][0]
    assert any(s2[0]["obs"] == first[0]["obs"] and len(s2) > 1 for s2 in out["agentmill_steps"][1:4])
    res = g2po_advantages(table, KEY, G2POConfig())
    assert res.diagnostics["merge_rate"] > 0
    with pytest.raises(ValueError, match="use_vllm=False"):
        fn(["keydoor-4"] * 4, SimpleNamespace(processing_class=tok, num_generations=4, state=trainer.state,
                                              args=SimpleNamespace(use_vllm=True)))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*same nonzero reward on every step")
def test_real_grpo_trainer_step_on_tree_groups(tiny, tmp_path) -> None:
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from agentmill.methods.g2po.adapters import trl_adapter

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
    trainer = Spy(model=model, processing_class=tok, reward_funcs=trl_adapter.episode_return, args=args,
                  train_dataset=ds, key_fn=KEY,
                  # a mostly-planning behaviour policy so that a tree holds both wins and losses (non-zero credit)
                  rollout_func=tree_rollout_func(_env, lambda tr: EpsilonOraclePolicy(0.5), max_steps=8, budget=40))
    trainer.train()
    assert trainer.state.global_step == 1
    adv = seen["adv"].numpy()
    table, owner, spans = trl_adapter.steps_to_table(seen["steps"], 4)
    expected = g2po_advantages(table, KEY, G2POConfig()).advantages
    np.testing.assert_allclose(adv, trl_adapter.per_token_advantages(expected, owner, spans, adv.shape), atol=1e-6)
    assert np.abs(adv).max() > 0.1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
