"""Smoke runs of every E174 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

IDS = ("dose", "loyalty", "calibration", "recovery", "replay", "interrogation", "endpoint", "perf")


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered_and_flags() -> None:
    from agentmill.experiments.e174_forensics import MODULES

    assert set(IDS) | {"organism", "episodes"} == set(MODULES)  # smoke-tested in test_organism_episodes.py
    for i in IDS:
        exp = get(f"e174.forensics_{i}")
        assert exp.parallel_safe == (i != "perf")
        assert exp.quick_budget_s is not None and exp.quick_budget_s <= 25


@pytest.mark.parametrize("name", IDS)
def test_smoke_measure_and_plots(name: str, tmp_path) -> None:
    exp = get(f"e174.forensics_{name}")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m and all(isinstance(v, Estimate) for v in m.values())
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    if name != "perf":
        assert len(ctx.data.get("prereg_sha256", "")) == 64
    if exp.plots is not None:
        paths = exp.plots(ctx.data, tmp_path)
        assert paths and all(p.exists() for p in paths)


def test_claims_can_fail() -> None:
    dose = get("e174.forensics_dose")
    assert dose.judge("quick", {"d50_quick": Estimate(63.0, 61.0, 66.0, n=800, method="b")})["FO-1-d50-quick"] \
        == "not_supported"
    loy = get("e174.forensics_loyalty")
    assert loy.judge("quick", {"conceal_diff": Estimate(0.1, 0.0, 0.2, n=200, method="newcombe")})["FO-2-diff"] \
        == "not_supported"
    cal = get("e174.forensics_calibration")
    v = cal.judge("quick", {"null_supported_share": Estimate(0.12, 0.085, 0.16, n=200, method="wilson"),
                            "aa_supported_count": Estimate.exact(1.0, n=200)})
    assert v["FO-3"] == "not_supported" and v["FO-3-AA"] == "not_supported"
    rec = get("e174.forensics_recovery")
    assert rec.judge("full", {"recall": Estimate(0.8, 0.74, 0.85, n=200, method="wilson")})["FO-5-recall"] \
        == "not_supported"
    rep = get("e174.forensics_replay")
    assert rep.judge("quick", {"span_violations": Estimate.exact(1.0, n=1000)})["FO-6-span"] == "not_supported"


def test_replay_battery_passes_at_smoke(tmp_path) -> None:
    exp = get("e174.forensics_replay")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["span_violations"].value == 0
    assert m["checks_passed"].value == 1.0, [c for c in ctx.data["checks"] if not c["passed"]]


@pytest.mark.slow  # ~4 s: the openai SDK import and a loopback server
def test_endpoint_run_replays_from_its_cassette(tmp_path) -> None:
    exp = get("e174.forensics_endpoint")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["cassette_identical"].value == 1.0
    assert ctx.data["endpoint_calls_recorded"] == ctx.data["episodes"]
