"""e162.tree_llm on scripted fakes: calibration reuse, per-(arm, prompt) checkpoints and resume, the metrics."""

from __future__ import annotations

import dataclasses

import json

import pytest

from agentmill import __version__
from agentmill.core.executor import make_executor
from agentmill.envs.arithmetic import make_pool
from agentmill.experiments import get
from agentmill.experiments.e162_tree_rollouts.arithmetic_pool import PoolSpec, checkpoint_path
from agentmill.experiments.protocol import RunContext, stamp_work_dir
from agentmill.lm import load_lm

pytest.importorskip("torch")


class CountingWhiteBox:
    """scripted:whitebox (a white box with a real forkable cache) that counts prompt prefills."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.inner = load_lm("scripted:whitebox")
        self.prefills, self.fail_after = 0, fail_after

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def forward(self, ids, cache=None, **kw):
        if cache is None and ids.shape[1] > 1:
            if self.fail_after is not None and self.prefills >= self.fail_after:
                raise KeyboardInterrupt
            self.prefills += 1
        return self.inner.forward(ids, cache, **kw)


def _ctx(tmp_path, lm, profile="smoke"):
    return RunContext(profile=profile, model="scripted:whitebox", executor=make_executor("serial"),
                      work_dir=tmp_path / "e162.tree_llm", lm_loader=lambda spec: lm)


def _write_calibration(tmp_path, setup, rates):
    """A pre-existing e162.collapse_llm checkpoint: the experiment must reuse it, not resample."""
    assert len(rates) == setup.calib_prompts  # a row short would be sampled by the run
    r2_setup = PoolSpec(prompts=setup.calib_prompts, samples=setup.calib_samples, max_new_tokens=setup.max_new_tokens,
                        temperature=setup.temperature, seed=setup.seed)
    ctx = RunContext(profile="smoke", model="scripted:whitebox", executor=None, work_dir=tmp_path / "e162.collapse_llm")
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    stamp_work_dir(ctx.work_dir, {}, __version__)  # made from this run's inputs (a scripted model reads no file)
    path = checkpoint_path(r2_setup, ctx)
    with open(path, "w") as f:
        for t, k in zip(make_pool(setup.calib_prompts, setup.seed), rates):
            rewards = [1.0] * k + [0.0] * (setup.calib_samples - k)
            f.write(json.dumps({"prompt_id": t.prompt_id, "level": t.level, "answer": t.answer, "rewards": rewards,
                                "reasons": [], "tokens": [], "texts": [], "seconds": 0}) + "\n")


def test_smoke_runs_reuses_calibration_and_plots(tmp_path) -> None:
    exp = get("e162.tree_llm")
    setup = exp.setups["smoke"]
    _write_calibration(tmp_path, setup, [1, 0, 1, 0, 4, 1, 0, 2] + [0] * 8)   # hard: ids 0, 2, ...; lake: 1, 3, 6
    lm = CountingWhiteBox()
    ctx = _ctx(tmp_path, lm)
    m = exp.measure(setup, ctx)
    n_trees = 3 * (setup.hard + setup.lake)
    assert lm.prefills == n_trees + 1                # one per tree + the throughput probe, none for calibration
    assert ctx.data["throughput_step0"]["decode_tok_s_b4"] > 0
    ids = [t.prompt_id for t in make_pool(setup.calib_prompts, setup.seed)]
    assert ctx.data["hard"] == [ids[0], ids[2]] and ctx.data["lake"] == [ids[1]]
    assert {"r3l_ratio", "r3l2_worst_token_ratio", "nc5_max_excess"} <= set(m)
    # trees share prefixes: at equal leaves the uucb arm never feeds more tokens than independent sampling
    assert m["r3l2_forward_ratio"].value <= 1.0 + 1e-9
    # Monte Carlo numbers carry an interval over prompts, never a bare point (issue 24)
    for key, n in (("r3l2_worst_token_ratio", 3), ("nc5_max_excess", 1)):
        e = m[key]
        assert e.method.startswith("cluster_bootstrap") and e.n == n and e.n_boot == setup.n_boot
        assert e.lo <= e.value <= e.hi
    w = m["r3l2_worst_token_ratio"].value
    assert w == max(m["r3l2_gen_ratio"].value, m["r3l2_forward_ratio"].value)
    rollouts = (tmp_path / "e162.tree_llm" / "rollouts.jsonl").read_text().splitlines()
    assert sum(1 for line in rollouts if json.loads(line)["selector"] == "uucb") >= setup.snapshot_leaves
    paths = exp.plots(json.loads(json.dumps(ctx.data)), tmp_path)
    assert all(p.exists() for p in paths)


def test_interrupted_run_resumes_per_tree(tmp_path) -> None:
    exp = get("e162.tree_llm")
    setup = exp.setups["smoke"]
    _write_calibration(tmp_path, setup, [1, 0, 1, 0, 4, 1, 0, 2] + [0] * 8)
    with pytest.raises(KeyboardInterrupt):
        exp.measure(setup, _ctx(tmp_path, CountingWhiteBox(fail_after=4)))
    lm = CountingWhiteBox()
    exp.measure(setup, _ctx(tmp_path, lm))
    # the first run did the probe and 3 trees; the rerun does the probe and only the trees not yet done
    assert lm.prefills == 3 * (setup.hard + setup.lake) - 3 + 1


def test_too_few_hard_prompts_is_a_clear_error(tmp_path) -> None:
    exp = get("e162.tree_llm")
    setup = exp.setups["smoke"]
    _write_calibration(tmp_path, setup, [0] * 16)
    with pytest.raises(ValueError, match="hard prompts"):
        exp.measure(setup, _ctx(tmp_path, CountingWhiteBox()))


def test_a_judging_setup_needs_two_hard_prompts_a_pipeline_check_one(tmp_path) -> None:
    from agentmill.experiments.e162_tree_rollouts.tree_llm import Setup

    exp = get("e162.tree_llm")
    smoke = exp.setups["smoke"]
    judging = Setup(**{f.name: getattr(smoke, f.name) for f in dataclasses.fields(Setup)})
    _write_calibration(tmp_path / "j", judging, [1] + [0] * 15)  # one prompt with 0 < p̂ <= 0.25
    with pytest.raises(ValueError, match="only 1 hard prompts"):
        exp.measure(judging, _ctx(tmp_path / "j", CountingWhiteBox()))
    _write_calibration(tmp_path / "p", smoke, [1] + [0] * 15)
    ctx = _ctx(tmp_path / "p", CountingWhiteBox())
    exp.measure(smoke, ctx)
    assert len(ctx.data["hard"]) == 1


def test_only_the_unjudged_setups_widen_the_hard_cut(tmp_path) -> None:
    """Full picks hard prompts by the pre-registered 0 < p̂ <= 0.25 [R]; the setups that judge nothing (smoke and quick,
    each a SmokeSetup, so the full setup keeps its fields and hash) take every prompt solved at least once."""
    import dataclasses

    from agentmill.experiments.e162_tree_rollouts.tree_llm import HARD_MAX, Setup, SmokeSetup

    exp = get("e162.tree_llm")
    smoke = exp.setups["smoke"]
    assert isinstance(smoke, SmokeSetup) and smoke.hard_max > HARD_MAX == 0.25
    assert isinstance(exp.setups["quick"], SmokeSetup) and type(exp.setups["full"]) is Setup
    spec_cut = Setup(**{f.name: getattr(smoke, f.name) for f in dataclasses.fields(Setup)})
    ids = [t.prompt_id for t in make_pool(smoke.calib_prompts, smoke.seed)]
    picked = {}
    for name, setup in (("smoke", smoke), ("spec", spec_cut)):
        _write_calibration(tmp_path / name, setup, [4, 0, 2, 0, 1, 3, 0, 1] + [0] * 8)  # p̂ 1 0 .5 0 .25 .75 0 .25
        ctx = _ctx(tmp_path / name, CountingWhiteBox())
        exp.measure(setup, ctx)
        picked[name] = ctx.data["hard"]
    assert picked == {"smoke": [ids[0], ids[2]], "spec": [ids[4], ids[7]]}


def test_quick_records_observed_values_and_judges_nothing(tmp_path) -> None:
    """Quick is a pipeline check (issue 24): every claim metric is kept as ``<metric>_observed`` and the claims come
    out not judged, with the reason naming full, never inconclusive."""
    exp = get("e162.tree_llm")
    setup = exp.setups["smoke"]
    _write_calibration(tmp_path, setup, [1, 0, 1, 0, 4, 1, 0, 2] + [0] * 8)
    ctx = _ctx(tmp_path, CountingWhiteBox(), profile="quick")
    m = exp.for_profile("quick", exp.measure(setup, ctx), ctx.data)
    metrics = [c.metric for c in exp.claims]
    assert not set(metrics) & set(m) and {f"{k}_observed" for k in metrics} <= set(m)
    verdicts, reasons = exp.judge_with_reasons("quick", m, ctx.data)
    assert set(verdicts.values()) == {"not_judged"}
    assert all("judged at full" in r for r in reasons.values())
