"""Exact tabular solvers: hand-checked cases, the E173 identity β·log(π*/π_ref) = A* on random
stochastic MDPs, and policy evaluation against Monte Carlo with an interval that tightens with samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.core.tabular_mdp import (UNREACHABLE, TabularMDP, bfs_distance, log_ratio_advantage,
                                        policy_evaluation, random_mdp, random_token_mdp, soft_advantage,
                                        soft_backward_induction,
                                        soft_policy_evaluation, soft_policy_iteration, soft_value_iteration)


def _bandit() -> TabularMDP:
    """One decision state (0) with two actions, both ending in absorbing state 1; rewards 1 and 0."""
    P = np.zeros((2, 2, 2))
    P[:, :, 1] = 1.0
    R = np.array([[1.0, 0.0], [0.0, 0.0]])
    return TabularMDP(P=P, R=R, gamma=0.9, absorbing=np.array([False, True]))


def _chain() -> TabularMDP:
    """0 -a0-> 1 -a0-> 2 (absorbing), reward 1 per step; a1 stays put with reward 0 (only valid at state 0)."""
    P = np.zeros((3, 2, 3))
    P[0, 0, 1] = P[1, 0, 2] = P[2, 0, 2] = P[0, 1, 0] = 1.0
    P[1, 1, 1] = P[2, 1, 2] = 1.0
    R = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    valid = np.array([[True, True], [True, False], [True, False]])
    return TabularMDP(P=P, R=R, gamma=0.5, valid=valid, absorbing=np.array([False, False, True]))


# ---------------------------------------------------------------- hand-checked values


def test_soft_optimum_of_a_bandit_by_hand():
    mdp = _bandit()
    ref = np.array([[0.5, 0.5], [0.5, 0.5]])
    Q, V, pi = soft_value_iteration(mdp, ref, beta=1.0)
    assert V[0] == pytest.approx(math.log((math.e + 1) / 2), abs=1e-14)
    assert V[1] == 0.0
    assert pi[0] == pytest.approx([math.e / (math.e + 1), 1 / (math.e + 1)], abs=1e-14)
    assert Q[0] == pytest.approx([1.0, 0.0], abs=1e-14)
    # beta -> 0 recovers the hard max; beta -> inf recovers pi_ref's expected reward
    assert soft_value_iteration(mdp, ref, beta=1e-3)[1][0] == pytest.approx(1.0 - 1e-3 * math.log(2), abs=1e-9)
    assert soft_value_iteration(mdp, ref, beta=1e6)[1][0] == pytest.approx(0.5, abs=1e-6)


def test_policy_evaluation_by_hand():
    mdp = _chain()
    pi = np.array([[0.5, 0.5], [1.0, 0.0], [1.0, 0.0]])
    V, Q = policy_evaluation(mdp, pi)
    # V1 = 1; V0 = 0.5*(1 + 0.5*V1) + 0.5*(0 + 0.5*V0)  =>  V0 = 0.75 / 0.75 = 1
    assert V == pytest.approx([1.0, 1.0, 0.0], abs=1e-14)
    assert Q[0] == pytest.approx([1.5, 0.5], abs=1e-14)
    assert np.isnan(Q[1, 1]) and np.isnan(Q[2, 1])  # invalid actions are NaN, never a silent number
    assert Q[2, 0] == 0.0  # absorbing


def test_soft_policy_evaluation_by_hand():
    mdp = _bandit()
    ref = np.array([[0.5, 0.5], [0.5, 0.5]])
    pi = np.array([[0.8, 0.2], [0.5, 0.5]])
    Q, V = soft_policy_evaluation(mdp, pi, ref, beta=2.0)
    kl = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    assert V[0] == pytest.approx(0.8 - 2.0 * kl, abs=1e-14)
    # the soft optimum beats this policy, and every other, in soft value
    _, Vs, _ = soft_value_iteration(mdp, ref, beta=2.0)
    assert Vs[0] > V[0]


def test_bfs_distance_by_hand():
    # 0 -> 1 -> 2 (goal); 3 -> 3 (dead end); 4 -> 0 or 3
    table = [[1, -1], [2, 0], [2, 2], [3, -1], [0, 3]]
    d = bfs_distance(table, [False, False, True, False, False])
    assert d.tolist() == [2, 1, 0, UNREACHABLE, 3]
    with pytest.raises(ValueError, match="rows"):
        bfs_distance(table, [False, True])


# ---------------------------------------------------------------- validation


def test_bad_inputs_raise():
    mdp = _chain()
    with pytest.raises(ValueError, match="sums to"):
        TabularMDP(P=np.full((2, 1, 2), 0.4), R=np.zeros((2, 1)), gamma=0.9)
    with pytest.raises(ValueError, match="gamma"):
        TabularMDP(P=np.full((2, 1, 2), 0.5), R=np.zeros((2, 1)), gamma=0.0)
    with pytest.raises(ValueError, match="without a valid action"):
        TabularMDP(P=np.full((2, 1, 2), 0.5), R=np.zeros((2, 1)), gamma=0.9, valid=np.array([[True], [False]]))
    with pytest.raises(ValueError, match="invalid actions"):
        policy_evaluation(mdp, np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="beta"):
        soft_value_iteration(mdp, np.array([[0.5, 0.5], [1.0, 0.0], [1.0, 0.0]]), beta=0.0)
    with pytest.raises(ValueError, match="pi_ref must be > 0"):
        soft_value_iteration(mdp, np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]), beta=1.0)


def test_gamma_one_needs_a_proper_policy():
    P = np.zeros((3, 2, 3))
    P[0, 0, 1] = P[0, 1, 0] = P[1, :, 2] = P[2, :, 2] = 1.0
    mdp = TabularMDP(P=P, R=np.ones((3, 2)), gamma=1.0, absorbing=np.array([False, False, True]))
    V, _ = policy_evaluation(mdp, np.array([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]))
    assert V == pytest.approx([3.0, 1.0, 0.0], abs=1e-12)  # geometric number of self-loops: 2 expected + 1
    with pytest.raises(ValueError, match="proper"):
        policy_evaluation(mdp, np.array([[0.0, 1.0], [0.5, 0.5], [0.5, 0.5]]))  # loops at 0 forever


def test_soft_value_iteration_with_gamma_one():
    """γ = 1 converges when absorption is certain (a self-loop that can always exit), and raises otherwise."""
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = P[0, 1, 1] = P[1, :, 1] = 1.0  # state 0: a0 loops, a1 exits to absorbing state 1
    R = np.array([[0.0, 1.0], [0.0, 0.0]])
    mdp = TabularMDP(P=P, R=R, gamma=1.0, absorbing=np.array([False, True]))
    ref = np.full((2, 2), 0.5)
    Q, V, pi = soft_value_iteration(mdp, ref, 1.0)
    # V = log(0.5 e^V + 0.5 e^1)  =>  e^V = e  =>  V = 1: looping is free, so the soft value is the exit's reward
    assert V[0] == pytest.approx(1.0, abs=1e-11)
    assert np.max(np.abs(log_ratio_advantage(pi, ref, 1.0)[0] - soft_advantage(Q, V)[0])) < 1e-10
    # with a loop reward r the fixed point needs π_ref(loop)·e^{r/β} < 1 (the KL cost tames a small r = 0.5:
    # 0.5·e^0.5 < 1); r = 1 gives 0.5·e > 1, the value grows without bound and the solver must say so
    R2 = np.array([[1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(RuntimeError, match="did not reach"):
        soft_value_iteration(TabularMDP(P=P, R=R2, gamma=1.0, absorbing=np.array([False, True])), ref, 1.0,
                             max_iter=2000)


# ---------------------------------------------------------------- the E173 identity


def _cases():
    for seed in range(50):
        kind = ("det", "dir0.1", "dir1")[seed % 3]
        yield seed, kind, (0.1, 1.0)[seed % 2]


@pytest.mark.parametrize("seed,kind,beta", list(_cases()))
def test_identity_log_ratio_equals_soft_advantage(seed, kind, beta):
    """β·log(π*/π_ref) = Q* − V* = A*, stochastic transitions included (P-1 a and b).

    (a) π* from soft VI against A* from soft VI; (b) π from soft policy iteration — which never runs the soft
    max — against A* from soft VI. Half the MDPs also have absorbing states and masked actions."""
    mdp, ref = random_mdp(20, 4, gamma=0.9, alpha=0.1 if kind == "dir0.1" else 1.0, deterministic=kind == "det",
                          seed=seed, n_absorbing=2 * (seed % 2), p_invalid=0.25 * (seed % 2))
    Q, V, pi = soft_value_iteration(mdp, ref, beta)
    A = soft_advantage(Q, V)
    lv = mdp.live_valid
    assert np.max(np.abs(log_ratio_advantage(pi, ref, beta, mdp.valid)[lv] - A[lv])) < 1e-10
    _, _, pi_pi = soft_policy_iteration(mdp, ref, beta)
    assert np.max(np.abs(log_ratio_advantage(pi_pi, ref, beta, mdp.valid)[lv] - A[lv])) < 1e-10
    # the soft Bellman equation holds (convergence), and V* is the soft value of π*
    Qe, Ve = soft_policy_evaluation(mdp, pi, ref, beta)
    assert np.max(np.abs(Ve - V)) < 1e-10
    assert np.max(np.abs(Qe[lv] - Q[lv])) < 1e-10


def test_identity_fails_away_from_the_optimum():
    """The identity is a property of π*, not of any policy: a perturbed π breaks it (the test can fail)."""
    mdp, ref = random_mdp(seed=3)
    Q, V, pi = soft_value_iteration(mdp, ref, 1.0)
    bad = 0.9 * pi + 0.1 * ref
    err = np.max(np.abs(log_ratio_advantage(bad, ref, 1.0) - soft_advantage(Q, V)))
    assert err > 1e-3


def test_soft_optimum_dominates_random_policies():
    """V* ≥ V^π_soft at every state for every π (optimality, checked independently of the solver's algebra)."""
    mdp, ref = random_mdp(seed=7, alpha=0.3)
    _, Vs, _ = soft_value_iteration(mdp, ref, 0.5)
    rng = np.random.default_rng(0)
    for _ in range(30):
        pi = rng.dirichlet(np.ones(mdp.n_actions), size=mdp.n_states)
        _, V = soft_policy_evaluation(mdp, pi, ref, 0.5)
        assert np.all(V <= Vs + 1e-10)


def test_soft_value_iteration_converges_geometrically():
    mdp, ref = random_mdp(seed=11, gamma=0.8)
    _, V_star, _ = soft_value_iteration(mdp, ref, 1.0, tol=1e-14)
    errs = []
    for tol in (1e-2, 1e-5, 1e-8, 1e-11):
        _, V, _ = soft_value_iteration(mdp, ref, 1.0, tol=tol)
        err = np.max(np.abs(V - V_star))
        assert err <= 0.8 * tol / (1 - 0.8) + 1e-13  # the contraction bound stated in the docstring
        errs.append(err)
    assert errs == sorted(errs, reverse=True) and errs[-1] < errs[0] * 1e-6


def test_backward_induction_identity_and_limit():
    mdp, ref = random_mdp(seed=5, gamma=0.7)
    Q, V, pi = soft_backward_induction(mdp, ref, 0.3, horizon=120)
    assert np.all(V[-1] == 0)
    for t in (0, 60, 119):
        assert np.max(np.abs(log_ratio_advantage(pi[t], ref, 0.3) - soft_advantage(Q[t], V[t]))) < 1e-10
    _, V_inf, _ = soft_value_iteration(mdp, ref, 0.3)
    assert np.max(np.abs(V[0] - V_inf)) < 1e-12  # 0.7^120 ≈ 3e-19 of the horizon remains
    assert np.max(np.abs(V[119] - V_inf)) > 1e-3  # one step before the end is far from stationary


# ---------------------------------------------------------------- policy evaluation vs Monte Carlo


def _mc_returns(mdp: TabularMDP, pi: np.ndarray, n: int, seed: int, horizon: int = 400) -> np.ndarray:
    rng = np.random.default_rng(seed)
    S = mdp.n_states
    s = rng.choice(S, size=n, p=mdp.start)
    G = np.zeros(n)
    disc = np.ones(n)
    alive = ~mdp.absorbing[s]
    cpi = np.cumsum(pi, 1)
    cP = np.cumsum(mdp.P, 2)
    for _ in range(horizon):
        a = np.minimum((rng.random(n)[:, None] > cpi[s]).sum(1), mdp.n_actions - 1)
        G += np.where(alive, disc * mdp.R[s, a], 0.0)
        s = np.minimum((rng.random(n)[:, None] > cP[s, a]).sum(1), S - 1)
        disc *= mdp.gamma
        alive &= ~mdp.absorbing[s]
    return G


@pytest.mark.parametrize("deterministic", [False, True])
def test_policy_evaluation_matches_monte_carlo(deterministic):
    """|MC mean − V^π(s0)| stays within 4 standard errors as the sample grows 16×, the interval shrinks ~4×, and a
    0.1 error in V would be detected at the large sample (the test has power)."""
    mdp, _ = random_mdp(8, 3, gamma=0.9, alpha=0.5, deterministic=deterministic, seed=2, n_absorbing=1)
    pi = np.random.default_rng(1).dirichlet(np.ones(3), size=8)
    V, Q = policy_evaluation(mdp, pi)
    v0 = float(mdp.start @ V)
    half = []
    for n, seed in ((1000, 0), (16000, 1)):
        G = _mc_returns(mdp, pi, n, seed)
        se = G.std(ddof=1) / math.sqrt(n)
        assert abs(G.mean() - v0) < 4 * se, (n, G.mean(), v0, se)
        half.append(1.96 * se)
    assert 2.5 < half[0] / half[1] < 6.0
    assert 0.1 > 4 * half[1] / 1.96
    # Q agrees with V: V = Σ_a π Q at live states
    live = ~mdp.absorbing
    assert np.allclose((np.nan_to_num(Q) * pi).sum(1)[live], V[live], atol=1e-12)


# ---------------------------------------------------------------- token-level MDP (P-3)


def test_token_mdp_indexing_by_hand():
    tm = random_token_mdp(n_states=2, vocab=2, action_len=3, seed=0)
    assert tm.n_nodes == 1 + 2 + 4
    assert tm.node_of(()) == 0 and tm.node_of((1,)) == 2 and tm.node_of((1, 0)) == 5
    assert tm.action_tokens[6].tolist() == [1, 1, 0]
    r = tm.pi_ref_tokens
    assert tm.action_pi_ref()[1, 6] == pytest.approx(r[1, 0, 1] * r[1, 2, 1] * r[1, 6, 0], rel=1e-14)
    assert tm.action_pi_ref().sum(1) == pytest.approx(np.ones(2), abs=1e-14)


@pytest.mark.parametrize("seed,deterministic,beta", [(0, False, 0.1), (1, True, 1.0), (2, False, 1.0)])
def test_token_log_ratios_sum_to_the_step_advantage(seed, deterministic, beta):
    """Σ_j β·log(π*(y_j|·)/π_ref(y_j|·)) = A*(s, a) where the token-level π* comes from solving the *token-level*
    MDP directly (γ = 1 plus a discount state), independent of the action-level solution."""
    tm = random_token_mdp(n_states=6, vocab=3, action_len=3, seed=seed, deterministic=deterministic,
                          n_absorbing=1)
    Q, V, _ = soft_value_iteration(tm.env, tm.action_pi_ref(), beta)
    A = soft_advantage(Q, V)
    mt, ref_t, index = tm.token_level()
    _, Vt, pt = soft_value_iteration(mt, ref_t, beta)
    assert np.max(np.abs(Vt[index[:, 0]] - V)) < 1e-10  # the root of each state has the env-level soft value
    pi_tok = pt[index]
    live = ~tm.env.absorbing
    summed = tm.token_log_ratios(pi_tok, beta).sum(2)
    assert np.max(np.abs(summed[live] - A[live])) < 1e-10
    assert np.max(np.abs(tm.token_soft_optimum(Q, beta)[live] - pi_tok[live])) < 1e-10
    # single tokens are not the advantage: mean and last differ from A* (P-3: only `sum` is exact)
    per_tok = tm.token_log_ratios(pi_tok, beta)[live]
    assert np.max(np.abs(per_tok[..., -1] - A[live])) > 1e-3
    assert np.max(np.abs(per_tok.mean(2) - A[live])) > 1e-3
