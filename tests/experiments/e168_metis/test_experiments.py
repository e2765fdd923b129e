"""Smoke runs of every E168 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered() -> None:
    from agentmill.experiments.e168_metis import MODULES

    assert {"gate", "diagnostic", "stream", "sandbox", "lm", "perf"} <= set(MODULES)
    assert get("e168.stream").parallel_safe and not get("e168.sandbox").parallel_safe


@pytest.mark.slow  # ~4 s: validator fixture in the sandbox child, 2 × 200 canonicalised queries
def test_gate_smoke(tmp_path) -> None:
    exp = get("e168.gate")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["mt1_checks_passed"].value == 1.0, [c for c in ctx.data["checks"] if not c["passed"]]
    assert m["mt8_purity"].value >= 0.95
    assert exp.judge("quick", m)["E168-MT1"] == "supported"
    bad = dict(m, mt1_checks_passed=Estimate.exact(0.9, n=30))
    assert exp.judge("quick", bad)["E168-MT1"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_diagnostic_smoke(tmp_path) -> None:
    exp = get("e168.diagnostic")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert {"mt2_calls_code_over_text_seen", "mt2_text_minus_code_unseen", "mt2_text_minus_code_psa"} <= set(m)
    assert exp.judge("smoke", m) == {c.id: "not_judged" for c in exp.claims}
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_stream_smoke(tmp_path) -> None:
    exp = get("e168.stream")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert {"mt4_metis_minus_none", "mt5_calls_metis_over_none", "mt3_naive_minus_none_psa"} <= set(m)
    assert ctx.data["policy_config"]["p_trust_tool"] == 1.0 and ctx.data["policy_config"]["p_wrong_plan"] == 0.35
    assert len(exp.plots(ctx.data, tmp_path)) == 2
    claim = next(c for c in exp.claims if c.id == "E168-MT3-naive")
    assert claim.judge(Estimate(0.1, 0.05, 0.15, n=3, method="x")) == "not_supported"
    assert claim.judge(Estimate(-0.1, -0.15, -0.05, n=3, method="x")) == "supported"


def test_sandbox_smoke_and_a_wrong_expectation_fails(tmp_path, monkeypatch) -> None:
    import agentmill.experiments.e168_metis.sandbox as E

    exp = get("e168.sandbox")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["mt9_contained_share"].value == 1.0, [r for r in ctx.data["cases"] if not r["contained"]]
    assert len(exp.plots(ctx.data, tmp_path)) == 1
    src, _, layer = E.CASES["huge output"]
    monkeypatch.setitem(E.CASES, "huge output", (src, "SandboxTimeout", layer))
    from agentmill.envs.appsim import AppSim
    from agentmill.methods.metis.toolbox import make_sandbox

    with make_sandbox(2.0) as sb:
        r = E.run_case("huge output", sb, AppSim(0), 2.0)
    assert r["got"] == "ToolOutputError" and not r["contained"]


@pytest.mark.parametrize("eid", ["e168.gate", "e168.diagnostic", "e168.stream", "e168.sandbox"])
def test_setups_are_ordered_by_size(eid: str) -> None:
    exp = get(eid)
    assert set(exp.setups) == {"smoke", "quick", "full"}


def test_perf_smoke(tmp_path) -> None:
    exp = get("e168.perf")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["pm1_warm_call_p50_ms"].value > 0 and m["pm4_stream_s"].value > 0
    assert len(ctx.data["pm1_window_p50_ms"]) == 2 and ctx.data["snapshot_bytes"] > 10_000
    assert len(exp.plots(ctx.data, tmp_path)) == 1
    assert not exp.parallel_safe


@pytest.mark.slow  # ~4 s: two 12-task LM streams over the loopback server
def test_lm_smoke_runs_on_the_loopback_stub_and_replays(tmp_path) -> None:
    exp = get("e168.lm")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    checks = ctx.data["checks"]
    assert checks["stream completed"] and checks["malformed reply re-asked"] and checks["non-compiling tool rejected"]
    assert checks["replay byte-identical"] and checks["replay made no LM request"]
    assert 0 < m["mt10_checks_passed"].value <= 1 and len(exp.plots(ctx.data, tmp_path)) == 1
