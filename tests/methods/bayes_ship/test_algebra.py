"""The decision algebra: the worked example, the Bayes update, and the derived properties D1–D5."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from agentmill.methods.bayes_ship import (BayesShipConfig, Belief, Calibration, ControlState, CostModel, CriticModel,
                                          GreedyController, Kernel, decide, purchase_band, voi)
from agentmill.methods.bayes_ship.core import bayes_update, max_voi, terminal_value


def _golden():
    cm = CriticModel("L2", 0.9, 0.2)
    cal = Calibration(0.3, 0, {"L2": cm}, Kernel.iid(0.3))
    cost = CostModel(R=100, c_gen=5, c_ver=30, critic_costs={"L2": 2.0})
    return cm, cal, cost


def test_worked_example() -> None:
    cm, cal, cost = _golden()
    d = GreedyController(cal, cost).decide(ControlState(0.3))
    assert d.action == "critic" and d.critic == "L2"
    assert d.q["critic:L2"] == pytest.approx(12.70, abs=1e-9)
    assert d.q["verify"] == pytest.approx(0.0, abs=1e-12) and d.q["give_up"] == 0 and d.q["generate"] == -5
    assert Belief(0.3).update(cm, True).value == pytest.approx(27 / 41, abs=1e-12)
    assert Belief(0.3).update(cm, False).value == pytest.approx(3 / 59, abs=1e-12)
    assert voi(0.3, cm, cost) == pytest.approx(14.7, abs=1e-9) == pytest.approx(max_voi(cm, cost))
    lo, hi = purchase_band(cm, 0.3)
    assert lo == pytest.approx(0.0869565, abs=1e-6) and hi == pytest.approx(0.7741935, abs=1e-6)
    g = GreedyController(cal, cost)
    assert g.decide(ControlState(27 / 41, frozenset({"L2"}))).action == "verify"
    assert g.decide(ControlState(3 / 59, frozenset({"L2"}))).action == "give_up"
    assert "θ=c_ver/R=0.3" in d.explanation and "VOI 14.7" in d.explanation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = Calibration(0.3, 0, {"L2": CriticModel("L2", 0.5, 0.5)}, Kernel.iid(0.3))
    assert GreedyController(flat, cost).decide(ControlState(0.3)).q["critic:L2"] == pytest.approx(-2.0)
    assert decide(0.3, cost, cal).critic == "L2"


def test_update_matches_closed_form_and_log_odds_add() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        b, p1, p0 = rng.uniform(0.01, 0.99, 3)
        c = CriticModel("k", float(p1), float(p0))
        for passed in (True, False):
            closed = (p1 * b / (p1 * b + p0 * (1 - b)) if passed
                      else (1 - p1) * b / ((1 - p1) * b + (1 - p0) * (1 - b)))
            assert abs(Belief(float(b)).update(c, passed).value - closed) < 1e-12
        c2 = CriticModel("j", *map(float, rng.uniform(0.01, 0.99, 2)))
        ab = Belief(float(b)).update(c, True).update(c2, False)
        ba = Belief(float(b)).update(c2, False).update(c, True)
        assert ab.logodds == pytest.approx(ba.logodds, abs=1e-12)


def test_clipping_keeps_log_odds_finite() -> None:
    c = CriticModel("oracle", 1.0, 0.0)
    b = Belief(0.0).update(c, True).update(c, True)
    assert math.isfinite(b.logodds) and 0 < b.value < 1
    assert Belief(1.0).update(c, False).value < 1


def test_d1_verify_beats_give_up_iff_belief_at_least_theta() -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        th, b = rng.uniform(0.01, 0.99, 2)
        cost = CostModel(R=100, c_ver=100 * th, critic_costs={})
        cal = Calibration(0.5, 0, {}, Kernel.iid(0.5))
        q = GreedyController(cal, cost).q_values(ControlState(float(b), candidates=5, max_candidates=5))
        assert (q["verify"] >= q["give_up"]) == (b >= th)


def test_d2_d3_d4_voi_nonnegative_band_and_peak() -> None:
    rng = np.random.default_rng(2)
    for _ in range(3000):
        th = float(rng.uniform(0.02, 0.98))
        p1 = float(rng.uniform(0.05, 0.99))
        p0 = float(rng.uniform(0.01, p1))
        b = float(rng.uniform(0.001, 0.999))
        cm = CriticModel("k", p1, p0)
        cost = CostModel(R=100, c_ver=100 * th, critic_costs={"k": 1.0})
        v = voi(b, cm, cost)
        assert v >= -1e-12
        lo, hi = purchase_band(cm, th)
        if b <= lo or b >= hi:
            assert abs(v) < 1e-9
        elif b < th:
            assert v == pytest.approx(b * p1 * (100 - 100 * th) - 100 * th * p0 * (1 - b), abs=1e-8)
        else:
            assert v == pytest.approx(100 * th * (1 - p0) * (1 - b) - 100 * (1 - p1) * b * (1 - th), abs=1e-8)
        assert v <= max_voi(cm, cost) + 1e-9
    cm = CriticModel("k", 0.8, 0.3)
    cost = CostModel(R=100, c_ver=40, critic_costs={"k": 1.0})
    assert voi(0.4, cm, cost) == pytest.approx(100 * 0.4 * 0.6 * 0.5)


def test_d4_zero_gap_never_bought_and_negative_gap_uses_abs() -> None:
    with pytest.warns(UserWarning, match="no signal"):
        z = CriticModel("Z", 0.7, 0.7)
    with pytest.raises(ValueError, match="no signal"):
        CriticModel("Z", 0.7, 0.7, strict=True)
    cal = Calibration(0.3, 0, {"Z": z}, Kernel.iid(0.3))
    for c in (1e-6, 0.1, 5.0):
        cost = CostModel(critic_costs={"Z": c})
        for b in np.linspace(0.001, 0.999, 101):
            assert GreedyController(cal, cost).decide(ControlState(float(b))).action != "critic"
    neg = CriticModel("N", 0.2, 0.9)
    cost = CostModel(R=100, c_ver=30, critic_costs={"N": 1.0})
    assert max_voi(neg, cost) == pytest.approx(100 * 0.3 * 0.7 * 0.7)
    assert voi(0.3, neg, cost) == pytest.approx(max_voi(neg, cost))


def test_d5_always_verify_loses_when_theta_above_prior() -> None:
    from agentmill.methods.bayes_ship.baselines import always_verify, give_up
    from agentmill.methods.bayes_ship.synthetic import WORLD_C, exact_evaluate

    cost = WORLD_C.cost(40.0)  # θ = 0.4 > b₀ = 0.2
    assert exact_evaluate(always_verify(), WORLD_C, cost).utility < exact_evaluate(give_up(), WORLD_C, cost).utility


def test_ship_action_and_terminal_value() -> None:
    _, cal, _ = _golden()
    cost = CostModel(R=100, c_ver=30, critic_costs={"L2": 2.0}, wrong_ship_loss=10)
    q = GreedyController(cal, cost).q_values(ControlState(0.9))
    assert q["ship"] == pytest.approx(90 - 1)
    assert terminal_value(0.9, cost) == pytest.approx(89)
    assert GreedyController(cal, cost).decide(ControlState(0.95, frozenset({"L2"}))).action == "ship"


@pytest.mark.parametrize("bad", [dict(R=0), dict(c_ver=-1), dict(unit="yen"), dict(critic_costs={"L0": -1})])
def test_cost_model_rejects_bad_values(bad) -> None:
    with pytest.raises(ValueError):
        CostModel(**bad)


@pytest.mark.parametrize("bad", [dict(grid=5), dict(max_candidates=0), dict(controller="x"), dict(stages="y")])
def test_config_rejects_bad_values(bad) -> None:
    with pytest.raises(ValueError):
        BayesShipConfig(**bad)


def test_probabilities_checked_and_calibration_round_trip() -> None:
    with pytest.raises(ValueError, match="p_pass_y1"):
        CriticModel("k", 1.2, 0.1)
    _, cal, _ = _golden()
    assert Calibration.from_json(cal.to_json()).to_dict() == cal.to_dict()
    with pytest.raises(ValueError, match="differ"):
        Calibration.from_json(cal.to_json(), critics=("L0",))
    with pytest.raises(ValueError, match="schema"):
        Calibration.from_json('{"schema": "x"}')
    assert bayes_update(0.5, 0.0, 0.0, True) == 0.5  # zero denominator leaves b unchanged
