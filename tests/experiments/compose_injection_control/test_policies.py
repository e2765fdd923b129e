"""C-injection-control's policies on inputs small enough to check by hand: the split, the binarising threshold, the
utility terms, the belief controller's posterior and decision, and the filter's threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.experiments.compose_injection_control.policies import (EPS_GAIN, BeliefPolicy, best_threshold,
                                                                       choices, fit_belief, fit_filter, outcome,
                                                                       split, utility_terms)
from agentmill.methods.bayes_ship import BayesShipConfig, Calibration, CostModel, CriticModel, Kernel, decide
from agentmill.methods.sherloc.confidence import FEATURES


def test_split_is_disjoint_covering_and_seeded() -> None:
    ids = [f"i{j}" for j in range(11)]
    cal, ev = split(ids, 0.4, seed=3)
    assert set(cal).isdisjoint(ev) and sorted(cal + ev) == sorted(ids)
    assert len(cal) == 4 and split(ids, 0.4, seed=3) == (cal, ev)
    assert split(ids, 0.4, seed=4) != (cal, ev)
    assert [len(x) for x in split(["a", "b"], 0.9, 0)] == [1, 1]  # both sides non-empty
    with pytest.raises(ValueError):
        split(["a", "a"], 0.5, 0)


def test_best_threshold_by_hand() -> None:
    # x: 0.1 0.2 | 0.8 0.9, y: 0 0 1 1 -> the cut at 0.5 separates perfectly: TPR 1, FPR 0
    assert best_threshold([0.1, 0.8, 0.2, 0.9], [0, 1, 0, 1]) == (0.5, 1.0)
    # a feature where lower is better: the cut keeps its sign (TPR − FPR = −1)
    assert best_threshold([3.0, 1.0], [0, 1]) == (2.0, -1.0)
    assert best_threshold([1.0, 1.0, 1.0], [0, 1, 1]) is None  # constant
    assert best_threshold([0.1, 0.9], [1, 1]) is None  # one class


def _policy(prior: float, critics: dict[str, tuple[float, float]], R: float, L: float) -> BeliefPolicy:
    cms = {k: CriticModel(k, p1, p0) for k, (p1, p0) in critics.items()}
    calib = Calibration(prior, 10, cms, Kernel.iid(prior))
    cost = CostModel(R=R, c_gen=0.0, c_ver=2 * R, critic_costs={k: 0.0 for k in cms}, wrong_ship_loss=L)
    return BeliefPolicy({k: 0.5 for k in cms}, calib, cost, R, L)


def test_belief_decision_with_two_critics_of_known_gap() -> None:
    # prior 0.5 (odds 1); A: P(pass|correct) 0.8, P(pass|wrong) 0.2 (LR 4 on a pass); B: 0.9 / 0.3 (LR 3 on a pass,
    # 0.1/0.7 = 1/7 on a fail). R = 1, L = 2: inject iff b ≥ 2/3.
    pol = _policy(0.5, {"A": (0.8, 0.2), "B": (0.9, 0.3)}, 1.0, 2.0)
    both = {"A": 0.9, "B": 0.9}
    assert pol.belief(both) == pytest.approx(12 / 13, rel=1e-6)  # odds 1·4·3 = 12
    d = pol.decision(both)
    assert d.action == "ship" and pol.inject(both)
    assert d.q["ship"] == pytest.approx(12 / 13 - 2 / 13, rel=1e-6) and d.q["give_up"] == 0.0
    mixed = {"A": 0.9, "B": 0.1}  # odds 4/7 -> b = 4/11 < 2/3
    assert pol.belief(mixed) == pytest.approx(4 / 11, rel=1e-6)
    assert pol.decision(mixed).action == "give_up" and not pol.inject(mixed)
    # the same decision through bayes_ship's one-call API with nothing left to buy
    assert decide(4 / 11, pol.cost, pol.calibration, used=("A", "B"), cfg=BayesShipConfig(max_candidates=1)
                  ).action == "give_up"
    # L = 0: injecting cannot hurt, so it injects at any belief
    assert _policy(0.5, {"A": (0.8, 0.2)}, 1.0, 0.0).inject({"A": 0.0})


def _feats(g: float) -> dict[str, float]:
    """E169's feature vector with only ``grounding`` varying."""
    return {**dict.fromkeys(FEATURES, 1.0), "grounding": g}


def _row(i: int, x: float, correct: bool, res_none: float, res_inj: float) -> dict:
    return {"instance": f"i{i}", "features": _feats(x), "correct": correct, "resolved_none": res_none,
            "resolved_injected": res_inj, "tokens_none": 10.0, "tokens_injected": 4.0}


def test_utility_terms_and_fit_belief_by_hand() -> None:
    # correct case files: injecting resolves 2/2 (smoothed 3/4) vs none 0/2 (1/4): R = 0.5;
    # wrong ones: none resolves 1/2 (2/4), injected 0/2 (1/4): L = 0.25
    rows = [_row(0, 0.9, True, 0, 1), _row(1, 0.8, True, 0, 1), _row(2, 0.1, False, 1, 0), _row(3, 0.2, False, 0, 0)]
    assert utility_terms(rows) == pytest.approx((0.5, 0.25))
    pol = fit_belief(rows, FEATURES)
    assert pol.thresholds == {"grounding": pytest.approx(0.5)}
    assert set(pol.dropped) == set(FEATURES) - {"grounding"}  # constant on these rows
    cm = pol.calibration.critics["grounding"]
    assert (cm.p_pass_y1, cm.p_pass_y0) == pytest.approx((3 / 4, 1 / 4))  # Beta(1,1): (2+1)/(2+2), (0+1)/(2+2)
    assert pol.calibration.prior == pytest.approx(0.5)
    # pass: b = 0.75 ≥ L/(R+L) = 1/3 -> inject; fail: b = 0.25 < 1/3 -> not
    assert pol.inject(_feats(0.7)) and not pol.inject(_feats(0.3))
    assert pol.summary()["belief_threshold"] == pytest.approx(1 / 3)
    # a split where injecting never helped: R floors at EPS_GAIN, L at 0
    flat = [_row(0, 0.9, True, 0, 0), _row(1, 0.1, False, 0, 0)]
    assert utility_terms(flat) == (EPS_GAIN, 0.0)


def test_filter_threshold_maximises_calibration_resolve_and_choices() -> None:
    rows = [_row(0, 0.9, True, 0, 1), _row(1, 0.8, True, 0, 1), _row(2, 0.1, False, 1, 0), _row(3, 0.2, False, 0, 0)]
    filt = fit_filter(rows)
    ps = [filt.score(r["features"]) for r in rows]
    assert min(ps[:2]) > max(ps[2:])  # the logistic model ranks the correct ones first
    # τ = 0 or p(row 2) injects all: 2/4 resolved; τ = p(row 3) spares row 2 (resolved only without the case
    # file) and injects row 3, where it changes nothing: 3/4, the best, and the smallest τ that reaches it
    assert filt.tau == pytest.approx(ps[3]) and ps[3] > ps[2]
    pick = choices(rows, fit_belief(rows, FEATURES), filt)
    assert pick["oracle"].tolist() == [True, True, False, False] == pick["belief"].tolist()
    assert pick["filter"].tolist() == [True, True, False, True]
    assert outcome(rows, pick["filter"]).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert outcome(rows, pick["filter"], "tokens").tolist() == [4.0, 4.0, 10.0, 4.0]
    assert outcome(rows, pick["never"], "tokens").tolist() == [10.0] * 4
    assert math.isclose(float(np.mean(outcome(rows, pick["always"]))), 0.5)


def test_duplicate_critics_form_one_family_and_count_once() -> None:
    # grounding and anchoring pass on exactly the same calibration rows: one family, one update (b = 0.75, not
    # odds 3·3 = 9 -> 0.9)
    rows = [_row(0, 0.9, True, 0, 1), _row(1, 0.8, True, 0, 1), _row(2, 0.1, False, 1, 0), _row(3, 0.2, False, 0, 0)]
    for r in rows:
        r["features"]["anchoring"] = r["features"]["grounding"]
    pol = fit_belief(rows, FEATURES)
    fams = {k: v["family"] for k, v in pol.summary()["critics"].items()}
    assert fams == {"grounding": "grounding", "anchoring": "grounding"}
    f = _feats(0.7) | {"anchoring": 0.7}
    assert pol.belief(f) == pytest.approx(0.75)
