"""Exact hitting times against golden values from exact solves [R] and the gradient against finite
differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.methods.backtrack_maze import (TabularPolicy, expected_hitting_time, hitting_time, mc_hitting_time,
                                              objective_and_grad, optimal_time, sft_converged_time)

# Golden values [R], W = 4, rounded to integers.
BASE_L2 = {2: 30, 4: 177, 6: 758, 8: 3068}
SFT_L2 = {2: 26, 4: 244, 6: 2190, 8: 19688, 10: 177154}
SFT_L3 = {2: 32, 4: 514, 6: 8196, 8: 131078, 10: 2097160}
OPT = {2: 14, 4: 28, 6: 42, 8: 56, 10: 70}


@pytest.mark.parametrize("K,value", BASE_L2.items())
def test_base_policy_golden(K, value) -> None:
    assert round(expected_hitting_time(TabularPolicy(4, K, 2))) == value


@pytest.mark.parametrize("L,table", [(2, SFT_L2), (3, SFT_L3)])
def test_sft_converged_golden_closed_form_and_solver(L, table) -> None:
    for K, value in table.items():
        assert sft_converged_time(4, K, L) == pytest.approx(value, abs=1e-6 * value)
        assert expected_hitting_time(TabularPolicy(4, K, L, init="sft_converged")) == pytest.approx(value, rel=1e-9)


@pytest.mark.parametrize("K,value", OPT.items())
def test_optimal_golden(K, value) -> None:
    assert optimal_time(4, K) == value
    assert expected_hitting_time(TabularPolicy(4, K, 2, init="optimal")) == pytest.approx(value, rel=1e-12)


def test_w4_k5_l2_values() -> None:
    assert expected_hitting_time(TabularPolicy(4, 5, 2)) == pytest.approx(371.5, abs=1e-9)
    assert expected_hitting_time(TabularPolicy(4, 5, 2, init="sft_converged")) == pytest.approx(731, abs=1e-9)
    assert sft_converged_time(4, 5, 2) == pytest.approx(731, abs=1e-9)
    assert optimal_time(4, 5) == 35


def test_closed_form_by_hand_for_K2_L1() -> None:
    """W=2, K=2, L=1, b=1/2: E_1 = ½(1+0) + ½(2 + E_1) -> E_1 = 3; T = 2 + 1·(3 + 3) = 8."""
    assert sft_converged_time(2, 2, 1) == pytest.approx(8.0)
    assert expected_hitting_time(TabularPolicy(2, 2, 1, init="sft_converged")) == pytest.approx(8.0)


@pytest.mark.parametrize("W,L", [(2, 2), (4, 3), (8, 4)])
def test_sft_law_exponential_in_K_affine_in_W(W, L) -> None:
    """[D]: ln T_SFT linear in K (R² >= 0.9999, slope within 2% of ln(L+1)); T_SFT exactly affine in W."""
    Ks = np.arange(2, 9)
    y = np.log([sft_converged_time(W, int(K), L) for K in Ks])
    slope, icpt = np.polyfit(Ks, y, 1)
    r2 = 1 - ((y - slope * Ks - icpt) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 >= 0.9999 and abs(slope / math.log(L + 1) - 1) <= 0.02
    T = [sft_converged_time(w, 5, L) for w in (2, 3, 4, 5)]
    assert np.allclose(np.diff(T), T[1] - T[0])


def test_sft_is_worse_than_base_from_K4() -> None:
    for K in (4, 6, 8):
        assert sft_converged_time(4, K, 2) > expected_hitting_time(TabularPolicy(4, K, 2))
    assert sft_converged_time(4, 2, 2) < expected_hitting_time(TabularPolicy(4, 2, 2))


def test_unreachable_target_is_inf_with_a_reason() -> None:
    # Hub probability of some arm underflows to exactly 0: that goal is never entered.
    p = TabularPolicy(3, 3, 2)
    p.theta_hub[:] = [0.0, 0.0, -1e4]
    ht = hitting_time(p)
    assert ht.value == math.inf and "unreachable" in ht.reason
    # Forward probability exactly 0 everywhere: the walk never reaches depth K.
    q = TabularPolicy(3, 3, 2)
    q.theta[..., :2] = -1e4
    ht = hitting_time(q)
    assert ht.value == math.inf and ht.reason
    v, g, why = objective_and_grad(q)
    assert v == math.inf and why and np.isnan(g).all()


def test_dead_end_trap_is_inf_with_a_reason() -> None:
    """Never backing off at (K-1, bwd): a wrong arm's dead end and (K-1, bwd) trap the walker forever, although
    the target is reachable from the hub."""
    p = TabularPolicy(3, 4, 2)
    p.theta[2, 1, 2] = -1e4
    ht = hitting_time(p)
    assert ht.value == math.inf and "cannot reach the target" in ht.reason


def test_non_finite_logits_are_bad_input() -> None:
    p = TabularPolicy(2, 2, 1)
    p.theta[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        hitting_time(p)


def test_env_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="env is"):
        hitting_time(TabularPolicy(2, 3, 1), PathStarMultigraph(2, 4, 1))


@pytest.mark.parametrize("objective", ["steps", "outcome"])
def test_gradient_matches_finite_differences(objective) -> None:
    rng = np.random.default_rng(0)
    p = TabularPolicy(3, 4, 2)
    p.set_flat(rng.normal(size=p.n_params))
    val, grad, why = objective_and_grad(p, objective)
    assert why is None
    x, h, num = p.get_flat(), 1e-6, np.zeros(p.n_params)
    for i in range(x.size):
        q = p.copy()
        y = x.copy()
        y[i] += h
        q.set_flat(y)
        a = objective_and_grad(q, objective)[0]
        y[i] -= 2 * h
        q.set_flat(y)
        num[i] = (a - objective_and_grad(q, objective)[0]) / (2 * h)
    if objective == "steps":
        assert np.abs(grad - num).max() <= 1e-6 * max(1.0, np.abs(grad).max())
        assert np.abs(grad).max() > 1.0  # not a vacuous comparison
    else:  # every full-support policy succeeds a.s.: P(success) = 1 and its gradient is exactly 0
        assert val == 1.0 and np.all(grad == 0.0) and np.abs(num).max() < 1e-6


def test_monte_carlo_agrees_with_exact_within_3se() -> None:
    env = PathStarMultigraph(3, 4, 2)
    for init in ("uniform", "sft_converged", "optimal"):
        pol = TabularPolicy(3, 4, 2, init=init)
        est = mc_hitting_time(pol, env, episodes=20_000, seed=7)
        se = (est.hi - est.lo) / (2 * 1.96)
        assert abs(est.value - expected_hitting_time(pol)) <= 3 * se


def test_monte_carlo_detects_a_wrong_value() -> None:
    """Power: the 3-SE check rejects a hitting time 5% off (base policy, 20 000 episodes)."""
    env = PathStarMultigraph(3, 4, 2)
    pol = TabularPolicy(3, 4, 2)
    est = mc_hitting_time(pol, env, episodes=20_000, seed=7)
    se = (est.hi - est.lo) / (2 * 1.96)
    assert abs(est.value - 1.05 * expected_hitting_time(pol)) > 3 * se
