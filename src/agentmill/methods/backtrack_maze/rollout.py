"""Sampling many maze episodes at once (numpy, vectorised over episodes).

One uniform draw per active episode and step, inverse-CDF over the policy's probabilities at the episode's
state. Finished episodes leave the active set, so the cost is proportional to the total number of moves.

Two interchangeable engines play a step: numpy over the active set while it is large, and a plain Python loop
once fewer than :data:`SCALAR_BELOW` episodes remain. Each numpy call costs microseconds however few episodes it
touches, and REINFORCE batches (32 episodes, long tails up to T_max) spent ~95 % of their time in that overhead.
Both engines draw ``rng.random(active)`` once per step in the same order and compare the same float64 CDFs, so the
switch point changes no result (tests compare against the all-numpy loop bit for bit).

Optionally records sufficient statistics for training: per-episode counts of (state, action) pairs for the whole
episode and for its *last segment* (from the last hub departure to the end), which is what stripped distillation
keeps [R].
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.envs.pathstar import BWD, FWD, PathStarMultigraph
from agentmill.methods.backtrack_maze.policy import TabularPolicy
from agentmill.methods.backtrack_maze.wrappers import RestartAfter

SCALAR_BELOW = 96
"""Active episodes below which :func:`run_episodes` plays the remaining moves in a Python loop: a numpy step costs
~100 µs of call overhead, a Python move ~1 µs. A speed knob only; results do not depend on it."""


@dataclass
class Episodes:
    """Outcome of ``n`` episodes. Count arrays are None unless ``record=True``.

    ``steps`` int64 [n] (restart charges included), ``success`` bool [n], ``restarts`` int64 [n];
    ``hub_counts`` [n, W], ``arm_counts`` [n, K-1, 2, L+1]; ``seg_hub_counts``/``seg_arm_counts`` the same for the
    last segment only.
    """

    steps: np.ndarray
    success: np.ndarray
    restarts: np.ndarray
    hub_counts: np.ndarray | None = None
    arm_counts: np.ndarray | None = None
    seg_hub_counts: np.ndarray | None = None
    seg_arm_counts: np.ndarray | None = None


def run_episodes(policy: TabularPolicy, env: PathStarMultigraph, n: int, rng: np.random.Generator, *,
                 t_max: int | None = None, wrapper: RestartAfter | None = None, record: bool = False) -> Episodes:
    """Run ``n`` episodes from the hub; an episode stops at the target or when its step count reaches ``t_max``.

    Without ``t_max`` the caller must make sure the target is reached almost surely (check the exact solver).
    """
    if (policy.W, policy.K, policy.L) != (env.W, env.K, env.L):
        raise ValueError(f"policy is for W={policy.W}, K={policy.K}, L={policy.L} but env is {env!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    W, K, L = env.W, env.K, env.L
    cum_hub = np.cumsum(policy.hub_probs())
    cum_arm = np.cumsum(policy.arm_probs(), axis=-1)
    goal = rng.integers(W, size=n)
    depth = np.zeros(n, dtype=np.int64)
    facing = np.zeros(n, dtype=np.int64)
    in_goal = np.zeros(n, dtype=bool)
    steps = np.zeros(n, dtype=np.int64)
    since = np.zeros(n, dtype=np.int64)
    restarts = np.zeros(n, dtype=np.int64)
    success = np.zeros(n, dtype=bool)
    if record:
        hub_c = np.zeros((n, W), dtype=np.int64)
        arm_c = np.zeros((n, K - 1, 2, L + 1), dtype=np.int64)
        seg_hub = np.zeros_like(hub_c)
        seg_arm = np.zeros_like(arm_c)
    act = np.arange(n)
    while act.size >= max(SCALAR_BELOW, 1):
        d, f = depth[act], facing[act]
        u = rng.random(act.size)
        action = np.full(act.size, L, dtype=np.int64)          # dead ends: forced back
        at_hub = d == 0
        choose = (d > 0) & (d < K)
        w = np.minimum(np.searchsorted(cum_hub, u[at_hub], side="right"), W - 1)
        action[at_hub] = w
        a = np.minimum((u[choose][:, None] > cum_arm[d[choose] - 1, f[choose]]).sum(axis=1), L)
        action[choose] = a
        goal_entry = np.zeros(act.size, dtype=bool)
        goal_entry[at_hub] = w == goal[act[at_hub]]
        if record:
            dep = act[at_hub]
            seg_hub[dep] = 0  # a hub departure starts a new segment
            seg_arm[dep] = 0
            np.add.at(hub_c, (dep, w), 1)
            np.add.at(seg_hub, (dep, w), 1)
            idx = (act[choose], d[choose] - 1, f[choose], a)
            np.add.at(arm_c, idx, 1)
            np.add.at(seg_arm, idx, 1)
        nd, nf, ng, ok = env.transition(d, f, in_goal[act], action, goal_entry)
        depth[act], facing[act], in_goal[act] = nd, nf, ng
        steps[act] += 1
        since[act] += 1
        success[act] = ok
        finished = ok.copy()
        if wrapper is not None:
            rs = ~ok & (since[act] >= wrapper.tau)
            r_idx = act[rs]
            depth[r_idx], facing[r_idx], in_goal[r_idx] = 0, FWD, False
            steps[r_idx] += wrapper.restart_cost
            since[r_idx] = 0
            restarts[r_idx] += 1
        if t_max is not None:
            finished |= steps[act] >= t_max
        act = act[~finished]
    if act.size:
        counts = (hub_c, arm_c, seg_hub, seg_arm) if record else None
        _finish_scalar(act, rng, cum_hub, cum_arm, goal, depth, facing, in_goal, steps, since, restarts, success,
                       counts, K, L, t_max, wrapper)
    out = Episodes(steps, success, restarts)
    if record:
        out.hub_counts, out.arm_counts, out.seg_hub_counts, out.seg_arm_counts = hub_c, arm_c, seg_hub, seg_arm
    return out


def _finish_scalar(act: np.ndarray, rng: np.random.Generator, cum_hub: np.ndarray, cum_arm: np.ndarray,
                   goal: np.ndarray, depth: np.ndarray, facing: np.ndarray, in_goal: np.ndarray, steps: np.ndarray,
                   since: np.ndarray, restarts: np.ndarray, success: np.ndarray,
                   counts: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None, K: int, L: int,
                   t_max: int | None, wrapper: RestartAfter | None) -> None:
    """Play the still-active episodes ``act`` to the end one move at a time; updates ``steps``, ``success``,
    ``restarts`` and ``counts`` in place (position and clock arrays are left stale: nobody reads them after).

    The same moves as the numpy loop of :func:`run_episodes`: per step one ``rng.random(len(active))`` in ascending
    episode order; the hub's arm is ``searchsorted(cum_hub, u, "right")`` (= ``bisect_right``), an arm node's move
    is ``(u > cum).sum()`` (= ``bisect_left`` on the nondecreasing CDF), both capped; then
    ``PathStarMultigraph.transition``, the restart wrapper and the horizon, in that order. A position is one code
    (hub 0; arm node (arm is goal, j, f) 1 + 2((K-1)·goal + j - 1) + f; dead end; target) with precomputed
    successors, which does per move what ``transition`` does with depth, facing and in_goal.
    """
    W = cum_hub.size
    W1, L1 = W - 1, L + 1
    hub_cdf = cum_hub.tolist()
    arm_cdf = cum_arm.reshape(-1, L1).tolist()         # row 2(j-1) + f
    n_arm = len(arm_cdf) * L1
    dead = 1 + 4 * (K - 1)
    target = dead + 1

    def code(in_g: int, j: int, f: int) -> int:
        return 1 + 2 * ((K - 1) * in_g + j - 1) + f

    cdf: list[list[float]] = [[]] * dead               # per arm code: its CDF, count offset, successors
    base, fwd, back = [0] * dead, [0] * dead, [0] * dead
    for in_g in (0, 1):
        for j in range(1, K):
            for f in (FWD, BWD):
                c = code(in_g, j, f)
                cdf[c], base[c] = arm_cdf[2 * (j - 1) + f], (2 * (j - 1) + f) * L1
                fwd[c] = code(in_g, j + 1, FWD) if j + 1 < K else (target if in_g else dead)
                back[c] = code(in_g, j - 1, BWD) if j > 1 else 0
    goal_entry, wrong_entry, dead_back = code(1, 1, FWD), code(0, 1, FWD), code(0, K - 1, BWD)

    m = act.size
    d0, f0, g0 = depth[act].tolist(), facing[act].tolist(), in_goal[act].tolist()
    pos = [0 if d == 0 else dead if d == K else code(int(ig), d, f) for d, f, ig in zip(d0, f0, g0)]
    g = goal[act].tolist()
    st, sn, rs = steps[act].tolist(), since[act].tolist(), restarts[act].tolist()
    done = [False] * m                                  # active episodes have not succeeded yet
    record = counts is not None
    if counts is not None:
        hc, ac = counts[0][act].tolist(), counts[1][act].reshape(m, -1).tolist()
        sh, sa = counts[2][act].tolist(), counts[3][act].reshape(m, -1).tolist()
    restart = wrapper is not None
    tau = wrapper.tau if wrapper is not None else 0
    cost = wrapper.restart_cost if wrapper is not None else 0
    horizon = t_max if t_max is not None else math.inf
    live = list(range(m))
    while live:
        nxt = []
        for i, u in zip(live, rng.random(len(live)).tolist()):
            c = pos[i]
            if c == 0:                                  # hub: choose an arm; a departure starts a new segment
                w = min(bisect_right(hub_cdf, u), W1)
                if record:
                    hc[i][w] += 1
                    seg = [0] * W
                    seg[w] = 1
                    sh[i] = seg
                    sa[i] = [0] * n_arm
                c = goal_entry if w == g[i] else wrong_entry
            elif c < dead:                              # arm node: L forward edges, then the back edge
                a = bisect_left(cdf[c], u)
                if a >= L:
                    c = back[c]
                    a = L
                else:
                    c = fwd[c]
                if record:
                    k = base[pos[i]] + a
                    ac[i][k] += 1
                    sa[i][k] += 1
            else:                                       # dead end: forced back (the draw is unused)
                c = dead_back
            t = st[i] + 1
            if c == target:
                st[i] = t
                done[i] = True
                continue
            if restart:
                since_i = sn[i] + 1
                if since_i >= tau:
                    c = 0
                    t += cost
                    since_i = 0
                    rs[i] += 1
                sn[i] = since_i
            pos[i] = c
            st[i] = t
            if t < horizon:
                nxt.append(i)
        live = nxt
    steps[act], restarts[act], success[act] = st, rs, done
    if counts is not None:
        counts[0][act] = hc
        counts[1][act] = np.asarray(ac, dtype=np.int64).reshape((m,) + counts[1].shape[1:])
        counts[2][act] = sh
        counts[3][act] = np.asarray(sa, dtype=np.int64).reshape((m,) + counts[3].shape[1:])


def mc_steps(policy: TabularPolicy, env: PathStarMultigraph, episodes: int, seed: int = 0,
             wrapper: RestartAfter | None = None) -> np.ndarray:
    """Steps to the target of ``episodes`` independent episodes (int64 [episodes]); no horizon.

    Refuses (ValueError) a policy whose exact hitting time is infinite without a wrapper, since the loop would
    not end; with a wrapper the caller vouches for termination.
    """
    if wrapper is None:
        from agentmill.methods.backtrack_maze.hitting import hitting_time

        ht = hitting_time(policy, env)
        if ht.reason is not None:
            raise ValueError(f"Monte Carlo hitting time is infinite: {ht.reason}")
    return run_episodes(policy, env, episodes, np.random.default_rng(seed), wrapper=wrapper).steps


def mc_hitting_time(policy: TabularPolicy, env: PathStarMultigraph, episodes: int = 20_000, seed: int = 0,
                    wrapper: RestartAfter | None = None) -> Estimate:
    """Monte Carlo E[T] with a normal 95% interval (mean ± 1.96 SE); ``n`` is the number of episodes."""
    steps = mc_steps(policy, env, episodes, seed, wrapper).astype(float)
    mean = float(steps.mean())
    se = float(steps.std(ddof=1) / np.sqrt(steps.size)) if steps.size > 1 else 0.0
    return Estimate(mean, mean - 1.96 * se, mean + 1.96 * se, n=steps.size, method="normal_se")
