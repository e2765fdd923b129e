"""Returns of a StepTable: the discounted return-to-go G_{i,t} and the episode score R_i
(GiGPO's convention, arXiv 2505.10978 Eq. 5)."""

from __future__ import annotations

import numpy as np

from agentmill.core.types import StepTable


def discounted_returns(table: StepTable, gamma: float) -> np.ndarray:
    """G_{i,t} = r_{i,t} + gamma * G_{i,t+1}, with G = 0 past the last row: truncation counts as termination, so
    nothing is bootstrapped past T_i (GiGPO's convention, arXiv 2505.10978 Eq. 5). Shape (S,), float64.

    Evaluated level by level from the largest t down, vectorised over all trajectories at that level: the same
    floating-point operations, in the same order, as the textbook backward loop, so results match it bitwise.
    """
    r = table.reward
    n = len(table)
    G = np.zeros(n, dtype=np.float64)
    cont = ~table.is_last
    order = np.argsort(table.t, kind="stable")
    counts = np.bincount(table.t)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    nxt = np.minimum(np.arange(n) + 1, n - 1)
    for level in range(len(counts) - 1, -1, -1):
        rows = order[bounds[level]:bounds[level + 1]]
        future = np.where(cont[rows], G[nxt[rows]], 0.0)
        G[rows] = r[rows] + gamma * future
    return G


def episode_scores(table: StepTable) -> np.ndarray:
    """R_i = sum_t r_{i,t}, undiscounted (verl's row sums of ``token_level_rewards``), one per trajectory in table
    order, shape (n_traj,)."""
    return np.bincount(table.traj_index, weights=table.reward)
