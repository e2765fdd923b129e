"""Smoke runs of every E172 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

IDS = ["e172.cliff_ztest", "e172.cliff_estimator", "e172.cliff_localization", "e172.cliff_taxonomy",
       "e172.cliff_deterministic", "e172.cliff_deletion", "e172.cliff_eos_quirk", "e172.cliff_dpo_compute",
       "e172.cliff_dpo_types", "e172.cliff_tiny_estimator", "e172.cliff_tiny_localization",
       "e172.cliff_tiny_deterministic", "e172.cliff_perf"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))


def _ctx(tmp_path) -> RunContext:
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered() -> None:
    from agentmill.experiments.e172_cliff_tokens import MODULES, PAPER

    assert len(MODULES) == len(IDS) + 2 and "2606.25524" in PAPER  # + PF-1 and CT-10: test_smollm2.py
    assert all(get(i).parallel_safe for i in IDS[:-1]) and not get("e172.cliff_perf").parallel_safe


@pytest.mark.parametrize("eid", [pytest.param(i, marks=pytest.mark.slow) if i in ("e172.cliff_eos_quirk",
                                 "e172.cliff_perf", "e172.cliff_dpo_compute", "e172.cliff_dpo_types") else i
                                 for i in IDS])  # those four: ~4 s of tiny torch each
def test_smoke_measure_and_plots(eid: str, tmp_path) -> None:
    exp = get(eid)
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    metrics = {c.metric for c in exp.claims}
    assert metrics & (set(m) | {k.removesuffix("_observed") for k in m})
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    if exp.plots is not None:
        assert all(p.exists() for p in exp.plots(ctx.data, tmp_path))


def test_ztest_smoke_passes_every_check(tmp_path) -> None:
    exp = get("e172.cliff_ztest")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["ct1_checks_passed"].value == 1.0, [c for c in ctx.data["checks"] if not c["passed"]]
    assert exp.judge("quick", m)["E172-CT1"] == "supported"
    assert exp.judge("quick", dict(m, ct1_checks_passed=Estimate.exact(0.95, n=40)))["E172-CT1"] == "not_supported"


def test_judges_can_fail() -> None:
    loc = get("e172.cliff_localization")
    bad = {"ct3_recall": Estimate(0.8, 0.7, 0.9, n=100, method="x"),
           "ct3_first_cliff_precision": Estimate(0.5, 0.4, 0.6, n=100, method="x")}
    assert set(loc.judge("quick", bad).values()) == {"not_supported"}
    eos = get("e172.cliff_eos_quirk")
    v = eos.judge("quick", {"ct9_unmasked_delta_eos": Estimate(0.1, 0.05, 0.15, n=30, method="x"),
                            "ct9_masked_delta_eos": Estimate(0.5, 0.4, 0.6, n=30, method="x")})
    assert set(v.values()) == {"not_supported"}
    det = get("e172.cliff_deterministic")
    v = det.judge("full", {"ct5a_max_df_drop": Estimate.exact(0.05), "ct5c_ratio_ci_contains_1": Estimate.exact(0.0)})
    assert v["E172-CT5a-max"] == "not_supported" and v["E172-CT5c"] == "not_supported"
