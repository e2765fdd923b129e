"""Derived properties P1-P7 of the G2PO-style estimator (g2po README, Derived properties), on seeded random groups."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from agentmill.core.types import StepTable
from agentmill.methods.g2po import G2POConfig, build_state_graph, g2po_advantages, grpo_advantages
from agentmill.methods.g2po.config import GRPOConfig
from agentmill.methods.g2po.keys import ExactKey
from tests.helpers.step_tables import random_step_table

KEY = ExactKey()
SEEDS = range(40)


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # low merge rate is the point of some of these tables
        return fn(*args, **kw)


# -- P1: no-repeat collapse (the negative control of issue 4) ----------------------------------------------------

@pytest.mark.parametrize("episode_norm", ["mean_std", "mean"])
def test_p1_unique_start_and_no_repeats_gives_grpo_exactly(episode_norm: str) -> None:
    worst = 0.0
    for seed in SEEDS:
        tb = random_step_table(np.random.default_rng(seed), n_groups=3, group_size=8, max_len=8, unique_obs=True,
                               shared_start=False, dense=bool(seed % 2))
        g2 = _quiet(g2po_advantages, tb, KEY, G2POConfig(episode_norm=episode_norm))
        gr = grpo_advantages(tb, GRPOConfig(norm=episode_norm))
        assert not g2.step.any()  # delta == 0 exactly on every edge, so the graph term is exactly 0
        worst = max(worst, float(np.max(np.abs(g2.advantages - gr.advantages))))
    assert worst < 1e-12


def test_p1_shared_start_graph_term_lives_on_the_first_step_only() -> None:
    for seed in SEEDS:
        tb = random_step_table(np.random.default_rng(seed), n_groups=2, group_size=8, max_len=8, unique_obs=True,
                               shared_start=True, dense=bool(seed % 2))
        res = _quiet(g2po_advantages, tb, KEY, G2POConfig(graph_norm="mean"))
        graph = build_state_graph(tb, KEY, gamma=0.95)
        delta, G, first = graph.td_of_row, graph.returns, tb.t == 0
        assert np.max(np.abs(delta[~first])) < 1e-12
        for g in np.unique(tb.group_index):
            rows = first & (tb.group_index == g)
            # delta_{i,0} = G_{i,0} - mean_j G_{j,0}: a mean-only discounted GRPO term on the first action
            np.testing.assert_allclose(delta[rows], G[rows] - G[rows].mean(), atol=1e-12)
        assert np.max(np.abs(res.step[~first])) < 1e-12  # mu = 0 (P2), so later steps get 0 under "mean"


def test_p1_shared_start_mean_std_inflates_the_first_step_by_sqrt_of_rows_over_trajectories() -> None:
    """sigma is taken over all S_g steps of the group, most of them 0, so A_hat_{i,0} = delta_{i,0}/sigma_steps is
    larger than delta_{i,0}/sigma_start by sqrt((S_g - 1)/(N - 1)) ~ sqrt(mean length). Measured, not fixed."""
    tb = random_step_table(np.random.default_rng(3), n_groups=1, group_size=8, max_len=12, unique_obs=True,
                           shared_start=True, dense=True)
    res = _quiet(g2po_advantages, tb, KEY, G2POConfig(epsilon=1e-12))
    delta = build_state_graph(tb, KEY, gamma=0.95).td_of_row
    first = tb.t == 0
    by_start = delta[first] / np.std(delta[first], ddof=1)
    ratio = res.step[first] / by_start
    np.testing.assert_allclose(ratio, np.sqrt((len(tb) - 1) / (first.sum() - 1)), rtol=1e-9)
    assert ratio[0] > 2.0  # mean length ~6.5 here


# -- P2: zero mean -----------------------------------------------------------------------------------------------

def test_p2_td_errors_sum_to_zero_within_each_group() -> None:
    for seed in SEEDS:
        tb = random_step_table(np.random.default_rng(seed), n_groups=3, group_size=6, max_len=8,
                               start_revisits=False, dense=bool(seed % 2))
        graph = build_state_graph(tb, KEY, gamma=0.9)
        sums = np.bincount(tb.group_index, weights=graph.td_of_row)
        assert np.max(np.abs(sums)) < 1e-12
        res = _quiet(g2po_advantages, tb, KEY, G2POConfig(gamma=0.9))
        assert abs(res.diagnostics["mu_delta"]) < 1e-12


def test_p2_fails_when_its_premises_fail() -> None:
    """The start revisited, or first-visit values: the sum is no longer 0 in general (the premise matters)."""
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=["S", "A", "S", "W"], actions=["x", "y", "z"], rewards=[0, 0, 1]),
        dict(group_id="g", traj_id="b", obs=["S", "C"], actions=["x"], rewards=[0], success=False),
    ])
    assert abs(build_state_graph(tb, KEY, gamma=0.9).td_of_row.sum()) > 1e-3
    tb2 = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=["S", "A", "B", "A", "W"], actions="wxyz", rewards=[0, 0, 0, 1]),
        dict(group_id="g", traj_id="b", obs=["S", "A", "C"], actions="wx", rewards=[0, 0], success=False),
    ])
    assert abs(build_state_graph(tb2, KEY, gamma=0.9).td_of_row.sum()) < 1e-12
    assert abs(build_state_graph(tb2, KEY, gamma=0.9, visit="first").td_of_row.sum()) > 1e-3


# -- P3: self-loops ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [0.5, 0.95, 1.0])
def test_p3_self_loop_costs_one_minus_gamma_times_value(gamma: float) -> None:
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=["S", "A", "A", "W"], actions=["go", "look", "open"], rewards=[0, 0, 1]),
        dict(group_id="g", traj_id="b", obs=["S", "A", "W"], actions=["go", "open"], rewards=[0, 1]),
    ])
    graph = build_state_graph(tb, KEY, gamma=gamma)
    v_a = graph.nodes[("g", "A")].value
    assert v_a > 0
    loop = graph.td_of_row[1]
    assert loop == pytest.approx((gamma - 1.0) * v_a, abs=1e-15)
    assert (loop < 0) if gamma < 1 else (loop == 0)


# -- P4: correlated node values (statistical; G-2 checks it at scale) -------------------------------------------

def test_p4_cov_of_successive_node_values_is_positive_and_delta_has_less_variance() -> None:
    """A two-room chain S -> A -> {W (p), C}: V(A) and V(S) share A's suffix returns, so Cov > 0 and
    Var(delta_SA) < Var V(S) + Var V(A). Resampled groups; the claim is checked with a 3-SE margin."""
    rng = np.random.default_rng(11)
    vs, va, ds = [], [], []
    for _ in range(400):
        eps = []
        for i in range(8):
            path, rew = ["S"], []
            while rng.random() < 0.3:  # dawdle at S
                path.append("S")
                rew.append(0.0)
            path.append("A")
            rew.append(0.0)
            win = rng.random() < 0.5
            path.append("W" if win else "C")
            rew.append(1.0 if win else 0.0)
            eps.append(dict(group_id="g", traj_id=str(i), obs=path, actions=["a"] * len(rew), rewards=rew))
        graph = build_state_graph(StepTable.from_episodes(eps), KEY, gamma=0.9)
        vs.append(graph.nodes[("g", "S")].value)
        va.append(graph.nodes[("g", "A")].value)
        ds.append(graph.edges[(("g", "S"), ("g", "A"))].td)
    vs, va, ds = map(np.asarray, (vs, va, ds))
    prod = (vs - vs.mean()) * (va - va.mean())
    assert prod.mean() - 3 * prod.std(ddof=1) / np.sqrt(len(prod)) > 0
    assert ds.var(ddof=1) < vs.var(ddof=1) + va.var(ddof=1)


# -- P5 / P6: credit inside failures; lucky transitions ---------------------------------------------------------

def test_p5_failed_run_step_into_a_winning_node_gets_positive_credit() -> None:
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=["S", "D", "W"], actions=["go", "open"], rewards=[0, 1]),
        dict(group_id="g", traj_id="b", obs=["S", "D", "W"], actions=["go", "open"], rewards=[0, 1]),
        dict(group_id="g", traj_id="c", obs=["S", "X", "C"], actions=["hide", "wait"], rewards=[0, 0], success=False),
        dict(group_id="g", traj_id="d", obs=["S", "D", "T"], actions=["go", "throw key"], rewards=[0, 0],
             success=False),
    ])
    res = g2po_advantages(tb, KEY)
    d_first = 6  # traj d, step 0: S -> D inside a failed run
    assert res.step[d_first] > 0 and grpo_advantages(tb).advantages[d_first] < 0
    assert res.step[7] < 0  # the decisive mistake D -> T gets the blame


def test_p6_stochastic_slip_credits_the_realised_transition() -> None:
    """The same action "go east" slips to B half of the time; the edge, not the action, gets the credit."""
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id=str(i), obs=["S", nxt, end], actions=["go east", "finish"],
             rewards=[0, float(end == "W")], success=end == "W")
        for i, (nxt, end) in enumerate([("A", "W"), ("B", "C"), ("A", "W"), ("B", "C")])])
    res = g2po_advantages(tb, KEY)
    assert res.step[0] > 0 > res.step[2]  # identical action, opposite credit: P6 is real and must be reported


# -- P7: invariances ---------------------------------------------------------------------------------------------

def test_p7_permuting_trajectories_changes_no_value() -> None:
    for seed in range(15):
        rng = np.random.default_rng(seed)
        tb = random_step_table(rng, n_groups=2, group_size=6)
        order = np.concatenate([rng.permutation(np.flatnonzero(tb.group_index[tb.traj_starts] == g))
                                for g in range(tb.n_groups)])
        perm = tb.take_trajectories(order)
        a, b = g2po_advantages(tb, KEY), g2po_advantages(perm, KEY)
        idx = {(str(g), str(t), int(s)): r for r, (g, t, s) in enumerate(zip(tb.group_id, tb.traj_id, tb.t))}
        back = np.array([idx[(str(g), str(t), int(s))] for g, t, s in zip(perm.group_id, perm.traj_id, perm.t)])
        assert np.max(np.abs(a.advantages[back] - b.advantages)) < 1e-12


def test_p7_adding_another_group_leaves_this_group_unchanged() -> None:
    rng = np.random.default_rng(5)
    tb = random_step_table(rng, n_groups=1, group_size=8)
    other = random_step_table(rng, n_groups=2, group_size=5)
    other = other.take(np.flatnonzero(other.group_id == "g1"))
    both = StepTable.concat([tb, other])
    a, b = g2po_advantages(tb, KEY), g2po_advantages(both, KEY)
    assert a.advantages.tobytes() == b.advantages[: len(tb)].tobytes()
    # "batch" scope pools the groups, so there the other group does matter
    c = g2po_advantages(both, KEY, G2POConfig(scope="batch"))
    assert np.max(np.abs(c.advantages[: len(tb)] - a.advantages)) > 1e-6


@pytest.mark.parametrize("c", [0.5, 3.0, 10.0])
def test_p7_scaling_rewards_leaves_mean_std_advantages_unchanged(c: float) -> None:
    for seed in range(10):
        tb = random_step_table(np.random.default_rng(seed), n_groups=2, group_size=6, dense=True)
        scaled = StepTable(**{**{n: getattr(tb, n) for n in ("group_id", "traj_id", "t", "obs", "next_obs",
                                                             "action", "end", "success", "info", "next_info")},
                              "reward": tb.reward * c})
        cfg = G2POConfig(epsilon=1e-12)  # exact up to epsilon: (c x)/(c s + eps) = x/(s + eps/c)
        np.testing.assert_allclose(g2po_advantages(scaled, KEY, cfg).advantages,
                                   g2po_advantages(tb, KEY, cfg).advantages, atol=1e-9)
        # with the default epsilon 1e-6 the difference is of order epsilon/sigma
        d = g2po_advantages(scaled, KEY).advantages - g2po_advantages(tb, KEY).advantages
        assert np.max(np.abs(d)) < 1e-4


@pytest.mark.parametrize("keep_initial", [False, True])
def test_p1_on_keydoor_rollouts_under_unique_obs(keep_initial: bool) -> None:
    """The issue's negative control on real rollouts: UniqueObs(p=1) on KeyDoor. Unique start: G2PO == GRPO (max
    diff < 1e-12). Shared start ("task prompt" kept): rows t >= 1 still equal GRPO to 1e-12."""
    from agentmill.envs.keydoor import KeyDoorConfig, generate_layout, make_keydoor
    from agentmill.envs.rollout import RandomPolicy, collect_groups
    from agentmill.envs.wrappers import UniqueObsWrapper
    from agentmill.methods.g2po.keys import FieldsKey

    cfg = KeyDoorConfig(n_rooms=3, n_locks=1, max_steps=20)  # random-policy success 6-12 % on these layouts
    tasks = [generate_layout(s, cfg) for s in (4, 6, 7)]
    tb, _, _ = collect_groups(lambda lay: UniqueObsWrapper(make_keydoor(layout=lay, config=cfg), p=1.0,
                                                           keep_initial=keep_initial), RandomPolicy(), tasks, 8, seed=9)
    key = FieldsKey(("description", "inventory"))
    g2 = _quiet(g2po_advantages, tb, key)
    diff = np.abs(g2.advantages - grpo_advantages(tb).advantages)
    rows = tb.t >= 1 if keep_initial else np.ones(len(tb), dtype=bool)
    assert diff[rows].max() < 1e-12
    if keep_initial:  # the shared first node still carries a mean-only first-action term where returns differ
        first = tb.t == 0
        varied = np.bincount(tb.group_index[first], weights=g2.returns[first] ** 2) * 8 > \
            np.bincount(tb.group_index[first], weights=g2.returns[first]) ** 2 + 1e-9
        assert varied.any()
        assert diff[first & varied[tb.group_index]].min() > 1e-6
