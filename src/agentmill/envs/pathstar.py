"""The multigraph path-star maze: chain-of-thought as path finding (E163 arXiv:2606.22938; details [R],
docs/methods/backtrack_maze.md).

A hub and ``W`` arms of ``K`` nodes each. At arm node ``(w, j)`` with ``1 <= j < K`` there are ``L`` parallel
forward edges to ``(w, j+1)`` and one back edge to ``(w, j-1)`` (to the hub when ``j = 1``). The goal arm ``g`` is
drawn uniformly and hidden; reaching ``(g, K)`` ends the episode with success. ``(w, K)`` for ``w != g`` is a
dead end whose only move is the back edge. Every move costs one step; an episode starts at the hub.

The agent observes only ``(depth j, facing f)`` where ``f`` is the direction of the last move, or "at hub". It
never observes the arm, so the hub choice is the "difficult decision" and a policy is shared across arms.

Action encoding: at the hub, the arm index ``0..W-1``; at an arm node, ``0..L-1`` for the forward edges and
``L`` (= :attr:`PathStarMultigraph.back`) for the back edge; at a dead end only ``L`` is legal.

The graph family is the paper's [S]; every detail here (where the parallel edges sit, facing in the state) is
this project's reconstruction [R].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FWD, BWD = 0, 1
"""Facing values: the last move went forward / backward."""


@dataclass(frozen=True)
class Observation:
    """What the agent sees: ``depth`` 0 at the hub (then ``facing`` is meaningless), else ``1..K``."""

    depth: int
    facing: int

    @property
    def at_hub(self) -> bool:
        return self.depth == 0


@dataclass(frozen=True)
class StepResult:
    obs: Observation
    done: bool
    success: bool


class PathStarMultigraph:
    """The maze with ``W >= 2`` arms of depth ``K >= 2`` and ``L >= 1`` parallel forward edges per step.

    Scalar episodes: :meth:`reset` then :meth:`step`. Many episodes at once: :meth:`transition` (pure, vectorised,
    used by the samplers in ``methods.backtrack_maze``).
    """

    def __init__(self, W: int, K: int, L: int) -> None:
        for name, val, lo in (("W", W, 2), ("K", K, 2), ("L", L, 1)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
                raise ValueError(f"PathStarMultigraph: {name} must be an integer >= {lo}, got {val!r}")
        self.W, self.K, self.L = int(W), int(K), int(L)
        self.back = self.L
        self._goal: int | None = None
        self._arm = -1
        self._depth = 0
        self._facing = FWD
        self._done = True

    def __repr__(self) -> str:
        return f"PathStarMultigraph(W={self.W}, K={self.K}, L={self.L})"

    # ---- constants --------------------------------------------------------------------------------------------
    @property
    def optimal_steps(self) -> int:
        """T* = K(2W-1): forward-only on the goal arm, back out at once from each dead end [D]."""
        return self.K * (2 * self.W - 1)

    def golden_path(self, goal: int, edges: np.ndarray | list[int]) -> list[tuple[Observation, int]]:
        """The shortest path to ``goal`` as (observation, action) pairs: hub -> goal, then ``K-1`` forward moves
        along the given forward-edge indices ``edges`` (length K-1, each in ``0..L-1``). K moves in all."""
        edges = list(edges)
        if not 0 <= goal < self.W:
            raise ValueError(f"goal must be in [0, {self.W}), got {goal}")
        if len(edges) != self.K - 1 or any(not 0 <= e < self.L for e in edges):
            raise ValueError(f"edges must be K-1={self.K - 1} forward-edge indices in [0, {self.L}), got {edges}")
        path = [(Observation(0, FWD), goal)]
        path += [(Observation(j, FWD), e) for j, e in zip(range(1, self.K), edges)]
        return path

    # ---- scalar episodes --------------------------------------------------------------------------------------
    def reset(self, rng: np.random.Generator, goal: int | None = None) -> Observation:
        """Start at the hub with a hidden goal arm (uniform unless ``goal`` is given)."""
        self._goal = int(rng.integers(self.W)) if goal is None else int(goal)
        if not 0 <= self._goal < self.W:
            raise ValueError(f"goal must be in [0, {self.W}), got {goal}")
        self._arm, self._depth, self._facing, self._done = -1, 0, FWD, False
        return Observation(0, FWD)

    def legal_actions(self, obs: Observation) -> range:
        if obs.at_hub:
            return range(self.W)
        if obs.depth == self.K:
            return range(self.back, self.back + 1)
        return range(self.L + 1)

    def step(self, action: int) -> StepResult:
        if self._done:
            raise RuntimeError("episode is over; call reset()")
        obs = Observation(self._depth, self._facing)
        if action not in self.legal_actions(obs):
            raise ValueError(f"illegal action {action} at {obs}; legal: {list(self.legal_actions(obs))}")
        if obs.at_hub:
            self._arm, self._depth, self._facing = action, 1, FWD
        elif action < self.L:
            self._depth, self._facing = self._depth + 1, FWD
        else:
            self._depth, self._facing = self._depth - 1, BWD
            if self._depth == 0:
                self._arm = -1
        success = self._arm == self._goal and self._depth == self.K
        self._done = success
        return StepResult(Observation(self._depth, self._facing), success, success)

    # ---- many episodes ----------------------------------------------------------------------------------------
    def transition(self, depth: np.ndarray, facing: np.ndarray, in_goal: np.ndarray, action: np.ndarray,
                   goal_entry: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One move for a batch of episodes (all arrays shape [n]).

        ``in_goal`` says whether the current arm is the goal arm (ignored at the hub); ``goal_entry`` says, for
        episodes at the hub, whether the chosen arm is the goal arm. Dead ends ignore ``action`` (forced back).
        Returns ``(depth, facing, in_goal, success)`` after the move.
        """
        at_hub = depth == 0
        dead = depth == self.K
        fwd = ~at_hub & ~dead & (action < self.L)
        new_depth = np.where(at_hub, 1, np.where(fwd, depth + 1, depth - 1))
        new_facing = np.where(at_hub | fwd, FWD, BWD)
        new_goal = np.where(at_hub, goal_entry, in_goal) & (new_depth > 0)
        success = new_goal & (new_depth == self.K)
        return new_depth, new_facing, new_goal, success
