"""Softmax policies and pg_step: exact gradients (finite differences), the KL-regularised fixed point, learning."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from agentmill.core.types import StepTable
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, layouts
from agentmill.envs.policies import LinearSoftmaxPolicy, SoftmaxTablePolicy, kl_per_step, pg_step
from agentmill.envs.rollout import Policy, collect_groups


def _bandit_table(rows):
    """One-step episodes: rows of (state text, candidates, action, reward)."""
    eps = []
    for k, (s, cands, a, r) in enumerate(rows):
        eps.append({"group_id": "g", "traj_id": f"t{k}", "obs": [s, "end"], "actions": [a], "rewards": [r],
                    "infos": [{"task_id": "bandit", "admissible_commands": list(cands)}, {}],
                    "candidates": [tuple(cands)]})
    return StepTable.from_episodes(eps)


def _objective(policy, steps, adv, beta=0.0, ref=None):
    """mean_rows(A·log π(a|s)) − β·mean_rows(KL_t): the surrogate whose gradient pg_step follows."""
    total = 0.0
    for i in range(len(steps)):
        total += adv[i] * policy.logprob(steps.obs[i], steps.info[i], steps.action[i])
    J = total / len(steps)
    if beta:
        J -= beta * kl_per_step(policy, ref, steps).mean()
    return J


def _random_setup(seed):
    rng = np.random.default_rng(seed)
    states = ["dark room", "bright hall", "cold cellar"]
    cmds = ["go north", "take lamp", "open door", "wait"]
    rows = []
    for _ in range(12):
        s = states[rng.integers(3)]
        cands = sorted(rng.choice(cmds, size=rng.integers(2, 5), replace=False).tolist())
        rows.append((s, cands, cands[rng.integers(len(cands))], 0.0))
    return _bandit_table(rows), rng.standard_normal(12)


@pytest.mark.parametrize("beta", [0.0, 0.7])
def test_table_pg_step_is_lr_times_the_exact_gradient(beta):
    steps, adv = _random_setup(0)
    pol = SoftmaxTablePolicy()
    ref = SoftmaxTablePolicy()
    rng = np.random.default_rng(1)
    for pl in (pol, ref):  # non-trivial starting points
        for i in range(len(steps)):
            key = pl._key(steps.obs[i], steps.info[i])
            pl.table.setdefault(key, {})
            for c in steps.candidates[i]:
                pl.table[key].setdefault(c, float(rng.normal()))
    before = {k: dict(v) for k, v in pol.table.items()}
    lr, h = 0.3, 1e-6
    numeric = {}
    for key, row in before.items():
        for c in row:
            plus, minus = pol.clone(), pol.clone()
            plus.table[key][c] += h
            minus.table[key][c] -= h
            numeric[(key, c)] = (_objective(plus, steps, adv, beta, ref) - _objective(minus, steps, adv, beta, ref)) / (2 * h)
    pg_step(pol, steps, adv, lr, kl_coef=beta, ref=ref if beta else None)
    for (key, c), g in numeric.items():
        assert pol.table[key][c] - before[key][c] == pytest.approx(lr * g, abs=1e-7)
    assert any(abs(g) > 1e-3 for g in numeric.values())


def test_linear_pg_step_is_lr_times_the_exact_gradient():
    steps, adv = _random_setup(2)
    pol = LinearSoftmaxPolicy(dim=512)
    pol.theta = np.random.default_rng(3).normal(size=512) * 0.3
    theta0 = pol.theta.copy()
    lr, h = 0.5, 1e-6
    touched = np.unique(np.concatenate([idx for i in range(len(steps))
                                        for idx, _ in pol.features(steps.obs[i], steps.candidates[i])]))
    grad = np.zeros(512)
    for j in touched:
        pol.theta = theta0.copy()
        pol.theta[j] += h
        jp = _objective(pol, steps, adv)
        pol.theta[j] -= 2 * h
        grad[j] = (jp - _objective(pol, steps, adv)) / (2 * h)
    pol.theta = theta0.copy()
    pg_step(pol, steps, adv, lr)
    np.testing.assert_allclose(pol.theta - theta0, lr * grad, atol=1e-7)
    assert np.abs(grad).max() > 1e-3


def test_kl_in_reward_pg_converges_to_the_soft_optimum():
    """Bandit with rewards r and reference ρ: the fixed point of pg_step with returns r − β·KL and kl_coef = β is
    π* ∝ ρ·exp(r/β) [D]. The expected gradient is formed exactly: one row per candidate, A_b = K·π_b·(r_b −
    β·KL), so mean_rows(A·∇log π) = E_π[(r − β·KL)·∇log π]."""
    cands = ["a", "b", "c"]
    r = np.array([1.0, 0.2, -0.5])
    rho = np.array([0.2, 0.5, 0.3])
    beta = 0.5
    ref = SoftmaxTablePolicy()
    ref.table[("bandit", ("s", ""))] = dict(zip(cands, np.log(rho)))
    pol = SoftmaxTablePolicy(key_fn=lambda o, i: (o, ""))
    ref.key_fn = pol.key_fn
    steps = _bandit_table([("s", cands, c, 0.0) for c in cands])
    info = steps.info[0]
    for _ in range(3000):
        p = np.exp(pol.log_probs("s", info, cands))
        kl = kl_per_step(pol, ref, steps)[0]
        adv = len(cands) * p * (r - beta * kl)
        pg_step(pol, steps, adv, lr=1.0, kl_coef=beta, ref=ref)
    target = rho * np.exp(r / beta)
    target /= target.sum()
    np.testing.assert_allclose(np.exp(pol.log_probs("s", info, cands)), target, atol=1e-6)


def test_acting_samples_the_softmax():
    pol = SoftmaxTablePolicy()
    assert isinstance(pol, Policy)
    info = {"task_id": "t", "admissible_commands": ["x", "y", "z"], "description": "d", "inventory": "i"}
    pol.table[("t", ("d", "i"))] = {"x": 1.0, "z": -1.0}
    p = np.exp(pol.log_probs("obs", info))
    assert p == pytest.approx(np.exp([1, 0, -1]) / np.exp([1, 0, -1]).sum())
    rng = np.random.default_rng(0)
    draws = [pol.act("obs", info, rng) for _ in range(6000)]
    counts = Counter(a for a, _ in draws)
    assert stats.chisquare([counts[c] for c in "xyz"], 6000 * p).pvalue > 1e-3
    assert all(lp == pytest.approx(math.log(p["xyz".index(a)])) for a, lp in draws[:50])
    assert pol.logprob("obs", info, "nope") == -math.inf
    # the task id is part of the key: another task with the same texts is untouched
    assert np.allclose(pol.log_probs("obs", dict(info, task_id="u")), -math.log(3))


def test_pg_step_rejects_bad_input():
    steps, adv = _random_setup(4)
    pol = SoftmaxTablePolicy()
    with pytest.raises(ValueError, match="shape"):
        pg_step(pol, steps, adv[:-1], 0.1)
    with pytest.raises(ValueError, match="finite"):
        pg_step(pol, steps, np.full(len(steps), np.nan), 0.1)
    with pytest.raises(ValueError, match="reference"):
        pg_step(pol, steps, adv, 0.1, kl_coef=0.1)
    bad = _bandit_table([("s", ["a", "b"], "c", 0.0)])
    with pytest.raises(ValueError, match="not among the candidates"):
        pg_step(pol, bad, np.ones(1), 0.1)


@pytest.mark.slow
def test_table_policy_learns_keydoor_with_group_relative_advantages():
    """REINFORCE with a group-mean baseline on 2 calibrated layouts: success rises (Fisher exact test)."""
    cfg = KeyDoorConfig()
    tasks = layouts(2, seed=0, calibrate=(0.05, 0.4), episodes=32, config=cfg)
    pol = SoftmaxTablePolicy()

    def factory(lay):
        return KeyDoorEnv(lay, cfg)

    def success(seed):
        steps, _, _ = collect_groups(factory, pol, tasks, group_size=100, seed=seed)
        return int(steps.success[steps.traj_starts].sum()), steps.n_trajectories

    k0, n0 = success(10_000)
    for it in range(40):
        steps, _, _ = collect_groups(factory, pol, tasks, group_size=8, seed=it)
        starts = steps.traj_starts
        ti = steps.traj_index
        ret = np.bincount(ti, weights=steps.reward)
        gi = steps.group_index[starts]
        base = np.bincount(gi, weights=ret) / np.bincount(gi)
        pg_step(pol, steps, (ret - base[gi])[ti], lr=2.0, normalize="trajectories")
    assert pol.n_parameters > 100
    k1, n1 = success(20_000)
    assert k1 / n1 > k0 / n0 + 0.15
    table = np.array([[k1, n1 - k1], [k0, n0 - k0]])
    assert stats.fisher_exact(table, alternative="greater").pvalue < 1e-4


def test_linear_policy_learns_a_contextual_bandit_and_generalises_across_rooms():
    """Reward for "take lamp" when the room text mentions a lamp, for "go north" otherwise; tested on room
    names never seen in training (the hashed features share tokens, not rooms)."""
    pol = LinearSoftmaxPolicy()
    rng = np.random.default_rng(0)
    cands = ["go north", "take lamp", "wait"]
    train_rooms, test_rooms = ["kitchen", "attic", "study", "garden"], ["vault", "chapel"]

    def batch(rooms, n):
        rows, info_rows = [], []
        for _ in range(n):
            room = rooms[rng.integers(len(rooms))]
            lamp = bool(rng.integers(2))
            s = f"-= {room} =- You see {'a lamp' if lamp else 'nothing special'}."
            info = {"task_id": "x", "admissible_commands": cands}
            a, _ = pol.act(s, info, rng)
            r = 1.0 if a == ("take lamp" if lamp else "go north") else 0.0
            rows.append((s, cands, a, r))
            info_rows.append(lamp)
        return rows, info_rows

    def accuracy(rooms):
        ok = 0
        for room in rooms:
            for lamp in (True, False):
                s = f"-= {room} =- You see {'a lamp' if lamp else 'nothing special'}."
                lp = pol.log_probs(s, {"admissible_commands": cands})
                ok += cands[int(np.argmax(lp))] == ("take lamp" if lamp else "go north")
        return ok / (2 * len(rooms))

    assert accuracy(test_rooms) < 1.0
    for _ in range(60):
        rows, _ = batch(train_rooms, 32)
        steps = _bandit_table(rows)
        r = steps.reward
        pg_step(pol, steps, r - r.mean(), lr=2.0)
    assert accuracy(train_rooms) == 1.0 and accuracy(test_rooms) == 1.0
    assert np.count_nonzero(pol.theta) > 50


def test_normalize_only_rescales_the_update():
    from agentmill.envs.rollout import RandomPolicy

    steps, _, _ = collect_groups(lambda s: KeyDoorEnv(layout_seed=s), RandomPolicy(), [0], group_size=3, seed=0)
    adv = np.random.default_rng(0).standard_normal(len(steps))
    S, n_traj = len(steps), steps.n_trajectories
    assert S > 3 * n_traj  # multi-step episodes, so the three normalisations differ
    deltas = {}
    for norm in ("rows", "trajectories", "none"):
        pol = SoftmaxTablePolicy()
        pg_step(pol, steps, adv, 0.1, normalize=norm)
        deltas[norm] = pol.table
    for key, row in deltas["rows"].items():
        for c, v in row.items():
            assert deltas["none"][key][c] == pytest.approx(S * v)
            assert deltas["trajectories"][key][c] == pytest.approx(S / n_traj * v)
    with pytest.raises(ValueError, match="normalize"):
        pg_step(SoftmaxTablePolicy(), steps, adv, 0.1, normalize="tokens")
