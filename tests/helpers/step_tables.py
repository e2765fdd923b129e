"""Hand-made and seeded random ``StepTable``s for estimator tests (worked example: docs/methods/g2po.md)."""

from __future__ import annotations

import numpy as np

from agentmill.core.types import StepTable


def golden_table() -> StepTable:
    """The worked example of docs/methods/g2po.md (gamma = 0.5): three trajectories from S; W = win, C = dead end."""
    return StepTable.from_episodes([
        dict(group_id="g", traj_id="t1", obs=["S", "A", "W"], actions=["go a", "win"], rewards=[0, 1]),
        dict(group_id="g", traj_id="t2", obs=["S", "B", "A", "W"], actions=["go b", "go a", "win"],
             rewards=[0, 0, 1]),
        dict(group_id="g", traj_id="t3", obs=["S", "A", "C"], actions=["go a", "go c"], rewards=[0, 0],
             end="truncated", success=False),
    ])


def random_step_table(rng: np.random.Generator, *, n_groups: int = 2, group_size: int = 4, n_states: int = 5,
                      max_len: int = 6, unique_obs: bool = False, shared_start: bool = True,
                      start_revisits: bool = True, dense: bool = False) -> StepTable:
    """Random walks over a few named states, with goal reward and random termination/truncation.

    ``unique_obs``: every observation gets a unique suffix (the UniqueObs world); with ``shared_start`` the first
    observation of a group stays shared. ``start_revisits=False`` keeps the start state out of later steps.
    ``dense``: random per-step rewards instead of a terminal reward.
    """
    episodes = []
    uid = 0
    for g in range(n_groups):
        start = f"start{g}"
        for i in range(group_size):
            T = int(rng.integers(1, max_len + 1))
            obs = [start]
            for _ in range(T):
                if start_revisits and rng.random() < 0.15:
                    obs.append(start)
                else:
                    obs.append(f"s{int(rng.integers(n_states))}")
            if unique_obs:
                obs = [o if (k == 0 and shared_start) else f"{o} [id {uid + k}]" for k, o in enumerate(obs)]
                uid += len(obs)
            terminated = bool(rng.random() < 0.7)
            if dense:
                rewards = np.round(rng.normal(size=T), 3).tolist()
            else:
                rewards = [0.0] * T
                if terminated and rng.random() < 0.5:
                    rewards[-1] = 1.0
                if rng.random() < 0.3:
                    rewards[int(rng.integers(T))] -= 0.1  # an invalid-action penalty somewhere
            episodes.append(dict(group_id=f"g{g}", traj_id=f"g{g}-{i}", obs=obs,
                                 actions=[f"a{int(rng.integers(3))}" for _ in range(T)], rewards=rewards,
                                 end="terminated" if terminated else "truncated",
                                 success=terminated and rewards[-1] > 0))
    return StepTable.from_episodes(episodes)
