"""Sampling many maze episodes at once (numpy, vectorised over episodes).

One uniform draw per active episode and step, inverse-CDF over the policy's probabilities at the episode's
state. Finished episodes leave the active set, so the cost is proportional to the total number of moves.

Optionally records sufficient statistics for training: per-episode counts of (state, action) pairs for the whole
episode and for its *last segment* (from the last hub departure to the end), which is what stripped distillation
keeps (spec §2.9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.envs.pathstar import FWD, PathStarMultigraph
from agentmill.methods.backtrack_maze.policy import TabularPolicy
from agentmill.methods.backtrack_maze.wrappers import RestartAfter


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
    while act.size:
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
    out = Episodes(steps, success, restarts)
    if record:
        out.hub_counts, out.arm_counts, out.seg_hub_counts, out.seg_arm_counts = hub_c, arm_c, seg_hub, seg_arm
    return out


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
