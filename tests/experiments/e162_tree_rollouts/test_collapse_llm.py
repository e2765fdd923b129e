from __future__ import annotations

import dataclasses
import json

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.e162_tree_rollouts.arithmetic_pool import checkpoint_path
from agentmill.experiments.e162_tree_rollouts.collapse_llm import pool_spec
from agentmill.experiments.protocol import RunContext
from agentmill.lm import load_lm


class CountingLM:
    """Wraps scripted:arith and counts generate calls, optionally failing after ``fail_after`` calls."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.inner, self.calls, self.fail_after = load_lm("scripted:arith"), 0, fail_after
        self.spec = "scripted:arith"

    def generate(self, prompts, config):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt  # a kill in the middle of sampling
        self.calls += 1
        return self.inner.generate(prompts, config)


def _ctx(tmp_path, lm):
    return RunContext(profile="smoke", model="scripted:arith", executor=make_executor("serial"),
                      work_dir=tmp_path, lm_loader=lambda spec: lm)


def test_smoke_runs_and_plots(tmp_path) -> None:
    exp = get("e162.collapse_llm")
    ctx = _ctx(tmp_path, CountingLM())
    m = exp.measure(exp.setups["smoke"], ctx)
    assert {"r2a_max_abs_err", "r2b_spearman", "r2c_lake_share", "nc1_collapse", "nc1_lake_mass"} <= set(m)
    # scripted:arith is right with probability 0.5 per sample, so the pass rate is near 0.5
    assert 0.3 < m["pass_rate"].value < 0.7
    # the coin-flip control is a Monte Carlo number: judged on its bootstrap over prompts, never one draw (issue 24)
    nc1 = m["nc1_collapse"]
    assert nc1.lo <= nc1.value <= nc1.hi and nc1.method == "bootstrap" and nc1.n_boot == 20
    assert m["nc1_lake_mass"].n_boot and m["nc1_lake_mass"].n == 8
    paths = exp.plots(json.loads(json.dumps(ctx.data)), tmp_path)  # plots work from a JSON round-trip
    assert len(paths) == 2 and all(p.exists() for p in paths)


def test_interrupted_sampling_resumes_without_regenerating(tmp_path) -> None:
    exp = get("e162.collapse_llm")
    setup = exp.setups["smoke"]
    with pytest.raises(KeyboardInterrupt):
        exp.measure(setup, _ctx(tmp_path, CountingLM(fail_after=3)))
    lines = checkpoint_path(pool_spec(setup), _ctx(tmp_path, None)).read_text().splitlines()
    assert len(lines) == 3
    lm = CountingLM()
    exp.measure(setup, _ctx(tmp_path, lm))
    assert lm.calls == setup.prompts - 3


def test_two_runs_reading_one_pool_at_once_sample_each_prompt_once(tmp_path) -> None:
    """R2 and R3's calibration may run in two workers of the main job at the same time: the second waits for the
    first (a lock beside the checkpoint) and reads its rows instead of sampling them again."""
    import threading
    import time

    from agentmill.experiments.e162_tree_rollouts.arithmetic_pool import sample_pool

    spec = pool_spec(get("e162.collapse_llm").setups["smoke"])

    class SlowLM(CountingLM):
        def generate(self, prompts, config):
            time.sleep(0.02)  # long enough for the other thread to arrive while this one samples
            return super().generate(prompts, config)

    lm, out = SlowLM(), {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, sample_pool(spec, _ctx(tmp_path, lm))))
               for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert lm.calls == spec.prompts and out[0] == out[1]
    assert len(checkpoint_path(spec, _ctx(tmp_path, None)).read_text().splitlines()) == spec.prompts


def test_torn_checkpoint_line_is_regenerated(tmp_path) -> None:
    exp = get("e162.collapse_llm")
    setup = exp.setups["smoke"]
    exp.measure(setup, _ctx(tmp_path, CountingLM()))
    path = checkpoint_path(pool_spec(setup), _ctx(tmp_path, None))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    lm = CountingLM()
    exp.measure(setup, _ctx(tmp_path, lm))
    assert lm.calls == 1
    # the regenerated row must be readable next time (not glued to the torn fragment and lost again)
    assert all(json.loads(line) for line in path.read_text().splitlines())
    lm = CountingLM()
    exp.measure(setup, _ctx(tmp_path, lm))
    assert lm.calls == 0


def test_bad_setup_is_rejected(tmp_path) -> None:
    exp = get("e162.collapse_llm")
    with pytest.raises(ValueError, match="samples must be even"):
        exp.measure(dataclasses.replace(exp.setups["smoke"], samples=5), _ctx(tmp_path, CountingLM()))


def test_quick_records_observed_values_and_judges_nothing(tmp_path) -> None:
    """Quick is a pipeline check (issue 24): the R2 and NC1 metrics are kept as ``<metric>_observed`` and the claims
    come out not judged, with the reason naming full."""
    exp = get("e162.collapse_llm")
    ctx = dataclasses.replace(_ctx(tmp_path, CountingLM()), profile="quick")
    m = exp.for_profile("quick", exp.measure(exp.setups["smoke"], ctx), ctx.data)
    metrics = [c.metric for c in exp.claims]
    assert not set(metrics) & set(m) and {f"{k}_observed" for k in metrics} <= set(m)
    verdicts, reasons = exp.judge_with_reasons("quick", m, ctx.data)
    assert set(verdicts.values()) == {"not_judged"} and all("judged at full" in r for r in reasons.values())
    full = exp.judge_with_reasons("full", exp.measure(exp.setups["smoke"], _ctx(tmp_path, CountingLM())))[0]
    assert "not_judged" not in full.values()
