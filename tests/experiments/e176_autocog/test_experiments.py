from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path):
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_library_smoke(tmp_path) -> None:
    exp = get("e176.library")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["ac1_mismatches"].value == 0  # exact identities
    assert m["ac1_gamma_star_max_abs_err"].value <= 0.05
    assert m["ac2_max_abs_diff"].value <= 1e-12
    assert [x["vs_wadd"] for x in ctx.data["dial_mid"] if x["v"] == [0.9, 0.8, 0.7, 0.6]] == [[2, 10]]  # [D]
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_library_judge_can_fail() -> None:
    """Power check: a wrong rule (raw dial) breaks the γ = 1 ≡ WADD identity's probabilities but not decisions;
    an off-by-one TTB order (take-the-worst) mismatches TTB on many pairs."""
    import numpy as np

    from agentmill.experiments.e176_autocog.library import _signs
    from agentmill.experiments.e176_autocog.reference_rules import binary_pairs
    from agentmill.methods.autocog import library as L

    v = (0.9, 0.8, 0.7, 0.6)
    A, B = binary_pairs(4)
    assert (_signs(L.take_the_worst(), A, B, v) != _signs(L.ttb(), A, B, v)).sum() > 50
    assert (_signs(L.dial(), A, B, v, gamma=2.0) != _signs(L.ttb(), A, B, v)).sum() == 18  # [D]
    assert np.isfinite(_signs(L.ew(), A, B, v)).all()


def test_gate_smoke(tmp_path) -> None:
    exp = get("e176.gate")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert 0 <= m["ac3_false_accept"].value <= 1 and m["ac3_accept_ttb_wadd"].value >= 0.5
    assert ctx.data["ac3_tests"] > 0 and len(exp.plots(ctx.data, tmp_path)) == 1


def test_conflict_design_is_what_it_says() -> None:
    from agentmill.experiments.e176_autocog.gate import conflict_design

    d = conflict_design()
    assert d.n_unique == 8 and d.n_trials == 96


@pytest.mark.slow
def test_recovery_smoke(tmp_path) -> None:
    exp = get("e176.recovery")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert 0 <= m["ac7_cell_pass_fraction"].value <= 1
    assert -1 <= m["ac7_mean_r"].value <= 1
    assert len(ctx.data["runs"]) == 1 and ctx.data["battery_check"]["1"]["passed"]
    run = ctx.data["runs"][0]
    assert 0 <= run["jsd_static_floor"] <= run["jsd_static"] + 1 and len(run["props_surfaced"]) == 40
    assert "ac7_mean_jsd_sequence" in m and "prospective" in run
    assert len(exp.plots(ctx.data, tmp_path)) == 3
