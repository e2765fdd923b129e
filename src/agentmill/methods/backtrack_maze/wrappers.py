"""Search wrappers around a maze policy (README deviation 6: a free restart beats RLVR).

``RestartAfter(tau, restart_cost=r)``: an external controller teleports the walker to the hub after ``tau`` steps
since the last restart (or the start) unless it has reached the target, charging ``r`` extra steps. The move count
since the restart is reset, and a teleport happens even when the walker already stands at the hub (it is the
controller's clock, not the walker's position, that triggers it).

On the SFT-converged policy with τ = K every try walks straight to a depth-K leaf, so E[T] = K·W + r(W-1)
(:func:`agentmill.methods.backtrack_maze.hitting.restart_time`), which beats RLVR's K(2W-1) whenever r < K: the
exponential separation concerns *in-chain* backtracking, not what a free external restart can do.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartAfter:
    tau: int
    """Steps since the last restart after which the walker is sent back to the hub."""
    restart_cost: int = 0
    """Steps charged per restart."""

    def __post_init__(self) -> None:
        if isinstance(self.tau, bool) or not isinstance(self.tau, int) or self.tau < 1:
            raise ValueError(f"RestartAfter: tau must be an integer >= 1, got {self.tau!r}")
        if isinstance(self.restart_cost, bool) or not isinstance(self.restart_cost, int) or self.restart_cost < 0:
            raise ValueError(f"RestartAfter: restart_cost must be an integer >= 0, got {self.restart_cost!r}")
