"""The E173 identity on code (claims P-1, P-2, P-3; issue 4 item 5): β·log(π*/π_ref) = A* to 1e-10 on random
stochastic KL-regularised MDPs — through the tabular function and through the full scorer."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from agentmill.core.tabular_mdp import TabularMDP, random_mdp, soft_advantage, soft_value_iteration
from agentmill.methods.progress_advantage import tabular_progress_advantage
from agentmill.methods.progress_advantage.exactness import (exactness_check, kl_pg_identity_curve,
                                                            reward_recovery_rms, scorer_exactness,
                                                            token_telescoping_errors)


def test_exactness_check_on_random_stochastic_mdps():
    rows = exactness_check(12, seed=100)
    assert len(rows) == 24 and {r["kind"] for r in rows} == {"det", "dir0.1", "dir1"}
    assert max(r["err_vi"] for r in rows) < 1e-10
    assert max(r["err_spi"] for r in rows) < 1e-10  # soft policy iteration: an independent route to π*
    assert max(r["err_value"] for r in rows) < 1e-10


@pytest.mark.parametrize("action_space", ["free_text", "candidates"])
@pytest.mark.parametrize("seed,alpha,det", [(0, 0.1, False), (1, 1.0, False), (2, 1.0, True)])
def test_scorer_recovers_the_soft_advantage_exactly(action_space, seed, alpha, det):
    """The whole scoring path (segments, BOS, spans, aggregation, candidate renormalisation) on a pair of canned
    LMs that are the tabular π* and π_ref: every step score equals A*(s_t, a_t) to 1e-10."""
    mdp, ref = random_mdp(12, 4, gamma=0.9, alpha=alpha, deterministic=det, seed=seed, n_absorbing=2,
                          p_invalid=0.25)
    out = scorer_exactness(mdp, ref, beta=0.3, n_episodes=6, horizon=10, action_space=action_space, seed=seed)
    assert out["n_steps"] >= 10 and out["max_err"] < 1e-10


def test_a_non_optimal_pair_is_not_exact():
    mdp, ref = random_mdp(seed=4)
    Q, V, pi = soft_value_iteration(mdp, ref, 1.0)
    err = np.nanmax(np.abs(tabular_progress_advantage(0.5 * (pi + ref), ref, 1.0) - soft_advantage(Q, V)))
    assert err > 1e-2


def test_kl_pg_error_falls_with_training():
    mdp, ref = random_mdp(seed=1, alpha=0.5)
    mdp = TabularMDP(P=mdp.P, R=mdp.R, gamma=mdp.gamma, start=np.full(20, 1 / 20))
    curve = kl_pg_identity_curve(mdp, ref, 1.0, lr=5.0, steps=1000, record=(0, 50, 100, 200, 400, 1000))
    Ks, errs, Js = zip(*[(r["K"], r["err"], r["J"]) for r in curve])
    assert spearmanr(Ks, errs).statistic <= -0.9
    assert errs[-1] < 0.1 * errs[0]
    assert all(b >= a - 1e-12 for a, b in zip(Js, Js[1:]))  # the objective never falls


def test_log_ratio_is_the_reward_only_for_deterministic_transitions():
    det, ref = random_mdp(seed=3, deterministic=True)
    assert reward_recovery_rms(det, ref, 1.0) < 1e-10
    rms = [reward_recovery_rms(*random_mdp(seed=3, alpha=a), 1.0) for a in (0.05, 5.0)]
    assert min(rms) > 0.05


def test_token_log_ratios_telescope():
    out = token_telescoping_errors(seed=2, beta=0.5)
    assert out["max_err_sum"] < 1e-10
    A = out["advantage"]
    assert np.max(np.abs(out["aggregates"]["mean"] - A)) > 1e-3  # mean is a heuristic, not the advantage
