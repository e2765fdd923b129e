"""PF-1 (fork vs naive re-prefill) and the CT-10 SmolLM2 demonstration: smoke runs on tiny stand-ins (no SmolLM2 in
tests), the quick plan, and the judges."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered_and_run_alone() -> None:
    for eid in ("e172.cliff_perf_smollm2", "e172.cliff_smollm2_demo"):
        exp = get(eid)
        assert not exp.parallel_safe and exp.uses_model
        assert exp.setups["full"].substrate == "model"


def test_pf1_smoke_measure_and_plots(tmp_path) -> None:
    exp = get("e172.cliff_perf_smollm2")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["pf1_identical_share_observed"].value == 1.0      # same streams → same counts
    assert ctx.data["counts_fork"] == ctx.data["counts_naive"]
    assert m["pf1_naive_prefill_tokens"].value > m["pf1_fork_prefill_tokens"].value
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    assert ctx.data["cpu"] and all(p.exists() for p in exp.plots(ctx.data, tmp_path))


def test_pf1_judges_can_fail() -> None:
    exp = get("e172.cliff_perf_smollm2")
    slow = {"pf1_speedup": Estimate(2.0, 1.8, 2.2, n=8, method="bootstrap"),
            "pf1_identical_share": Estimate.exact(0.875, n=8)}
    assert exp.judge("full", slow) == {"E172-PF1": "not_supported", "E172-PF1-counts": "not_supported"}
    fast = {"pf1_speedup": Estimate(4.0, 3.5, 4.6, n=8, method="bootstrap"),
            "pf1_identical_share": Estimate.exact(1.0, n=8)}
    assert exp.judge("full", fast) == {"E172-PF1": "supported", "E172-PF1-counts": "supported"}


@pytest.mark.slow  # ~1.5 s idle, 4 s on a loaded machine (matplotlib + the tiny pipeline)
def test_ct10_smoke_measure_and_plots(tmp_path) -> None:
    exp = get("e172.cliff_smollm2_demo")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert "ct10_cliff_trace_share_observed" in m and m["ct10_traces"].value >= 1
    tr = ctx.data["traces"][0]
    assert tr["bisect_points"] and "exhaustive" in tr and tr["T"] == len(tr["tokens"])
    assert exp.judge("smoke", m, ctx.data) == {"E172-CT10": "not_judged"}
    assert all(p.exists() for p in exp.plots(ctx.data, tmp_path))


def test_ct10_is_reported_only_and_full_only(tmp_path) -> None:
    exp = get("e172.cliff_smollm2_demo")
    ctx = _ctx(tmp_path, "quick")
    assert exp.measure(exp.setups["quick"], ctx) == {} and "full only" in ctx.data["plan_only"]
    assert exp.judge("quick", {}, ctx.data) == {"E172-CT10": "not_judged"}
    ctx = _ctx(tmp_path, "full")
    m = exp.measure(exp.setups["smoke"], ctx)       # a full-profile run never judges the demonstration
    assert exp.judge("full", m, ctx.data) == {"E172-CT10": "not_judged"}
