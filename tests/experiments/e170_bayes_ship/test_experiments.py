"""Smoke runs of every E170 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered() -> None:
    from agentmill.experiments.e170_bayes_ship import MODULES

    assert {"algebra", "regimes", "uq", "pyrepo", "lm", "perf"} <= set(MODULES)
    assert get("e170.bayes_ship_regimes").parallel_safe and not get("e170.bayes_ship_perf").parallel_safe


def test_algebra_smoke(tmp_path) -> None:
    exp = get("e170.bayes_ship_algebra")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["b1_max_abs_error"].value < 1e-12 and m["b1_golden_error"].value < 1e-9
    assert m["b2_zero_gap_selections"].value == 0 and m["b2_d4_violations"].value == 0
    assert exp.judge("quick", m)["E170-B1"] == "supported"
    bad = dict(m, b2_zero_gap_selections=Estimate.exact(1, n=10))
    assert exp.judge("quick", bad)["E170-B2-zero"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow  # ~5 s: exact regime maps on a 6-point grid
def test_regimes_smoke(tmp_path) -> None:
    exp = get("e170.bayes_ship_regimes")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["b4_margin"].value >= 0  # the DP is never beaten beyond its grid error (N = 200 at smoke)
    assert m["ctrl_max_abs_gap"].value <= 0.5
    assert exp.judge("smoke", m) == {c.id: "not_judged" for c in exp.claims}
    assert exp.judge("quick", dict(m, b3_longest_C_in_WC=Estimate.exact(2, n=6)))["E170-B3-C"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 2


def test_uq_smoke(tmp_path) -> None:
    exp = get("e170.bayes_ship_uq")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert 0.6 < m["b5_synth_auroc"].value < 1
    claim = next(c for c in exp.claims if c.id == "E170-B5-synth")
    assert claim.judge(Estimate(-0.05, -0.07, -0.03, n=100, method="x")) == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_perf_smoke(tmp_path) -> None:
    exp = get("e170.bayes_ship_perf")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["pf2_policy_mismatches"].value == 0 and m["pf2_speedup"].value > 1
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow  # ~10 s: builds the fixture package and runs its pytest oracle and critics in the sandbox
def test_pyrepo_and_lm_smoke_on_the_fixture(tmp_path) -> None:
    exp = get("e170.bayes_ship_pyrepo")
    work = tmp_path / "e170.bayes_ship_pyrepo"
    work.mkdir()
    ctx = _ctx(work)
    m = exp.measure(exp.setups["smoke"], ctx)
    rows = (work / "candidates-0.jsonl").read_text().splitlines()
    assert len(rows) == 2 and ctx.data["kinds"] == {"noop": 1, "revert": 1}
    assert m["pf8_oracle_s"].value > 0 and "b6_cells_bayes_worse" in m
    assert ctx.data["calibration_all"]["critics"]["L0_syntax"]["p_pass_y1"] > 0
    m2 = exp.measure(exp.setups["smoke"], ctx)  # resumes from the JSONL: no new rows
    assert len((work / "candidates-0.jsonl").read_text().splitlines()) == 2 and set(m2) == set(m)
    assert exp.judge("full", {})["E170-B6a"] == "inconclusive"
    assert len(exp.plots(ctx.data, tmp_path)) == 1
    # the LM roles score the same records (a scripted fake: every answer equally likely); the runner stamps a
    # work dir with what it was made from, and only a stamped one is shared
    from agentmill import __version__
    from agentmill.experiments.protocol import stamp_work_dir

    stamp_work_dir(work, {}, __version__)
    lm = get("e170.bayes_ship_lm")
    lwork = tmp_path / "e170.bayes_ship_lm"
    lwork.mkdir()
    lctx = _ctx(lwork)
    lm_m = lm.measure(lm.setups["smoke"], lctx)
    assert lctx.data["l3_passes"]["wrong"] == 1 and lm_m["b10_l3_gap"].value == 0  # P(yes) = 0.5 passes all
    assert len(lm.plots(lctx.data, tmp_path)) == 1


def test_lm_without_pyrepo_records_is_a_precondition(tmp_path) -> None:
    exp = get("e170.bayes_ship_lm")
    work = tmp_path / "e170.bayes_ship_lm"
    work.mkdir()
    ctx = _ctx(work)
    assert exp.measure(exp.setups["smoke"], ctx) == {}
    assert ctx.data["precondition"].startswith("precondition not met")
    v = exp.judge("full", {}, ctx.data)
    assert v == {c.id: "inconclusive" for c in exp.claims}
