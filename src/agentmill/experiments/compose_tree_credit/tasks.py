"""The two environments of the composition's claims: KeyDoor layouts and TextWorld games, as (tasks, env factory).

KeyDoor: the default world (6 rooms, 2 locks, a trap, 2 loops), layouts calibrated to random-policy success in
[0.05, 0.5] (``envs.keydoor.layouts``), as E165 uses them. TextWorld: ``tw-make custom`` games calibrated to
random-policy success in [0.05, 0.6] (``envs.textworld_env.make_games`` defaults, cached), 40 steps, as E165 G-7.
Both may be wrapped in ``UniqueObsWrapper`` (the no-repeat control).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.seeding import derive_seed
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, layouts
from agentmill.envs.wrappers import UniqueObsWrapper

KEYDOOR = KeyDoorConfig()
"""The default KeyDoor world (E165's G-3 setup): 30 steps."""
TEXTWORLD_MAX_STEPS = 40
"""Steps per TextWorld episode (E165 G-7)."""


@dataclass(frozen=True)
class EnvFactory:
    """``task -> env`` for either environment, optionally under ``UniqueObsWrapper(p=unique_p)``."""

    kind: str
    unique_p: float | None = None

    def __call__(self, task: Any) -> Any:
        if self.kind == "keydoor":
            env: Any = KeyDoorEnv(task, KEYDOOR)
        else:
            from agentmill.envs.textworld_env import TextWorldEnv

            env = TextWorldEnv(task, max_steps=TEXTWORLD_MAX_STEPS)
        if self.unique_p is None:
            return env
        return UniqueObsWrapper(env, p=self.unique_p, seed=derive_seed("tree-credit-unique", 0))


def max_steps(kind: str) -> int:
    return KEYDOOR.max_steps if kind == "keydoor" else TEXTWORLD_MAX_STEPS


def make_tasks(kind: str, n: int, seed: int, work_dir: Path) -> list[Any]:
    """``n`` calibrated KeyDoor layouts from ``seed`` on, or ``n`` TextWorld games from tw-make seed ``seed`` on."""
    if kind == "keydoor":
        return layouts(n, seed=seed, config=KEYDOOR)
    if kind == "textworld":
        from agentmill.envs.textworld_env import make_games

        return make_games(work_dir / "tw_games", n, seed0=seed, max_steps=TEXTWORLD_MAX_STEPS)
    raise ValueError(f"unknown environment {kind!r}; expected 'keydoor' or 'textworld'")
