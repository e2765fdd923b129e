"""The TRL rollout_func adapter: one row per input, exact prefix logprobs, sampling checks, a real GRPOTrainer step."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentmill.lm import load_lm  # noqa: E402
from agentmill.methods.tree_rollouts.config import TreeConfig  # noqa: E402
from agentmill.methods.tree_rollouts.integrations.trl import make_trl_rollout_func, prompt_key, reward_from_tree  # noqa: E402
from agentmill.methods.tree_rollouts.tree import Reward  # noqa: E402


def _trainer(**args):
    base = dict(temperature=1.0, top_p=1.0, top_k=None, min_p=None, repetition_penalty=1.0, use_vllm=False,
                max_completion_length=10)
    base.update(args)
    return SimpleNamespace(args=SimpleNamespace(**base), accelerator=SimpleNamespace(process_index=0),
                           state=SimpleNamespace(global_step=3))


def _verify(text, truth):
    return Reward(float(len(text) % 2), "parity")


@pytest.fixture(scope="module")
def wb():
    return load_lm("scripted:whitebox")


def test_one_row_per_input_in_order_with_runs(wb):
    f = make_trl_rollout_func(verifier=_verify, lm=wb, tree=TreeConfig(budget_tokens=None, max_leaves=4))
    prompts = ["abc"] * 4 + ["xyz"] * 3     # a run split across processes may be shorter than num_generations
    out = f(prompts, _trainer())
    assert all(len(out[k]) == 7 for k in out)
    assert out["prompt_ids"][0] == wb.render("abc") and out["prompt_ids"][4] == wb.render("xyz")
    assert len(set(out["tree_id"][:4])) == 1 and out["tree_id"][0] != out["tree_id"][4]
    for comp, lps in zip(out["completion_ids"], out["logprobs"]):
        assert len(comp) == len(lps) and 1 <= len(comp) <= 10
    assert reward_from_tree(out["completion_ids"], out["tree_reward"]) == out["tree_reward"]


def test_logprobs_of_shared_prefixes_equal_a_full_reencode(wb):
    f = make_trl_rollout_func(verifier=_verify, lm=wb, selector="random", tree=TreeConfig(budget_tokens=None, max_leaves=6),
                              branch_every=2)
    out = f(["hello"] * 6, _trainer(max_completion_length=12))
    assert any(p > 0 for p in out["branch_pos"])          # some leaves really branch from a shared prefix
    for p_ids, comp, lps in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"]):
        logits = wb.forward(torch.tensor([p_ids + comp])).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        ref = [lp[len(p_ids) - 1 + j, t].item() for j, t in enumerate(comp)]
        assert np.allclose(ref, lps, atol=1e-4)


def test_sampling_settings_and_answers_are_checked(wb):
    f = make_trl_rollout_func(verifier=_verify, lm=wb)
    for bad in (dict(top_p=0.9), dict(top_k=50), dict(min_p=0.1), dict(repetition_penalty=1.1), dict(use_vllm=True)):
        with pytest.raises(ValueError):
            f(["a"] * 2, _trainer(**bad))
    g = make_trl_rollout_func(verifier=_verify, lm=wb, temperature=0.7)
    with pytest.raises(ValueError, match="temperature"):
        g(["a"] * 2, _trainer())
    h = make_trl_rollout_func(verifier=_verify, lm=wb, answers={"known": 1})
    with pytest.raises(KeyError, match="sha1="):
        h(["unknown"] * 2, _trainer())
    msgs = [{"role": "user", "content": "hi"}]
    assert prompt_key(msgs) == prompt_key([{"content": "hi", "role": "user"}])


@pytest.mark.slow
@pytest.mark.hf
def test_real_grpo_trainer_step_with_tree_rollouts(tmp_path):
    """One real TRL GRPOTrainer step on SmolLM2 with the tree rollout_func: rewards come from the tree."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentmill.envs.arithmetic import ArithmeticTask, example_pair, make_pool
    from agentmill.lm.hf import load_uncached

    smol = load_uncached("smollm2", dtype="float32", threads=None, max_batch=16)  # a private copy: training edits it

    tasks = make_pool(2, 1000, levels=(1,))
    ds = Dataset.from_list([{"prompt": t.completion_prompt(example_pair(1, 1000, i))} for i, t in enumerate(tasks)])

    def verify(text, prompt):
        return ArithmeticTask.from_prompt(prompt).verify(text)

    seen = []

    def reward(completions, tree_reward=None, **kw):
        seen.extend(tree_reward)
        return reward_from_tree(completions, tree_reward)

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1,
                      max_completion_length=12, learning_rate=1e-6, logging_steps=1, report_to=[], use_cpu=True,
                      save_strategy="no", bf16=False)
    trainer = GRPOTrainer(model=smol.model, processing_class=smol.tokenizer, reward_funcs=reward, args=args,
                          train_dataset=ds, rollout_func=make_trl_rollout_func(verifier=verify))
    trainer.train()
    assert len(seen) == 4 and all(r in (0.0, 1.0) for r in seen)
    assert trainer.state.global_step == 1


def test_the_trl_extra_installs_only_versions_the_gate_accepts(monkeypatch):
    """Issue 20, item 8 (TRL range): the tree adapter needs ``rollout_func(prompts, trainer)`` (TRL >= 0.26), a wider
    range than pyproject's ``trl`` extra, which follows the G2PO adapter; both ends of the extra's range pass here
    and the version before 0.26 is refused."""
    import tomllib
    from pathlib import Path

    import trl
    from packaging.specifiers import SpecifierSet

    from agentmill.methods.tree_rollouts.integrations.trl import _check_trl_version

    pyproject = Path(__file__).resolve().parents[4] / "pyproject.toml"
    (req,) = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["trl"]
    spec = SpecifierSet(req[len("trl"):])
    for version, accepted in (("1.16.0", True), ("1.16.99", True), ("0.26.0", True), ("0.25.1", False)):
        monkeypatch.setattr(trl, "__version__", version)
        if version.startswith("1.16"):
            assert spec.contains(version)
        if accepted:
            assert _check_trl_version() == version
        else:
            with pytest.raises(RuntimeError, match="needs trl >= 0.26"):
                _check_trl_version()
