"""The KeyDoor rollout groups the E165 experiments score: the state key, the environment factory, the task layouts and
epsilon-oracle rollout groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmill.core.seeding import derive_seed
from agentmill.core.types import LabelTable, StepTable
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, KeyDoorLayout, layouts
from agentmill.envs.rollout import EpsilonOraclePolicy, collect_groups
from agentmill.envs.wrappers import UniqueObsWrapper
from agentmill.methods.g2po.keys import FieldsKey

KEY = FieldsKey(("description", "inventory"))
"""The default state key for KeyDoor and TextWorld [R] (docs/methods/g2po.md, Hyperparameters)."""


@dataclass(frozen=True)
class KeyDoorFactory:
    """``task -> env`` for ``collect_groups``: KeyDoor, optionally under ``UniqueObsWrapper(p, keep_initial)``."""

    config: KeyDoorConfig
    unique_p: float | None = None
    keep_initial: bool = False

    def __call__(self, layout: KeyDoorLayout) -> Any:
        env = KeyDoorEnv(layout, self.config)
        if self.unique_p is None:
            return env
        return UniqueObsWrapper(env, p=self.unique_p, keep_initial=self.keep_initial, seed=derive_seed("g4", 0))


def keydoor_tasks(s: Any, config: KeyDoorConfig = KeyDoorConfig()) -> list[KeyDoorLayout]:
    """``s.n_layouts`` calibrated layouts (random success in [0.05, 0.5] [R], ``envs.keydoor.layouts``)."""
    return layouts(s.n_layouts, seed=s.layout_seed, config=config)


def keydoor_rollouts(tasks: list[KeyDoorLayout], groups: int, group_size: int, epsilon: float, seed: int,
                     factory: KeyDoorFactory) -> tuple[StepTable, LabelTable]:
    """``groups`` groups of ε-oracle rollouts, cycling through ``tasks``."""
    batch = [tasks[k % len(tasks)] for k in range(groups)]
    table, labels, _ = collect_groups(factory, EpsilonOraclePolicy(epsilon), batch, group_size, seed=seed)
    return table, labels


OBSERVABLE = KeyDoorConfig(trap=False, droppable=False, slip=0.0, max_steps=200)
"""G-1 setup [R]: trap off, no droppable items, slip 0, max_steps 200."""
