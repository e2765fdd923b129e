"""The text-environment protocol and the environment registry [R].

Every agentmill text world speaks the Gymnasium 1.x calling convention with strings for observations and actions:

    obs, info = env.reset(seed=..., options=...)
    obs, reward, terminated, truncated, info = env.step("go north")

so that a policy, a rollout collector or an RL framework adapter never needs to know which world it is playing.
``info`` always carries the keys of :data:`REQUIRED_INFO_KEYS`; privileged state (the distance to the goal, the
true state id) lives only under ``info["oracle"]``, which the rollout collector moves into a ``LabelTable`` before
anything an estimator can see is built (keys must never see privileged labels: that would leak the true state [R]).

The registry holds explicit names only (house rule 11): ``make("keydoor-v0")``. Entries are import paths resolved
on first use, so ``import agentmill.envs`` never imports an optional dependency such as ``textworld``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

ORACLE_KEY = "oracle"
"""The info namespace for privileged labels [R]; never visible to state keys or estimators."""

REQUIRED_INFO_KEYS = ("admissible_commands", "won", "lost", "task_id", "step", "invalid_action", "feedback",
                      ORACLE_KEY)
"""Keys every environment's ``info`` carries after ``reset`` and every ``step`` [R]."""

ORACLE_KEYS = ("distance_to_goal", "state_id", "dead_end", "plan_commands")
"""Keys of ``info["oracle"]``: ``distance_to_goal`` (int, ``DEAD_END_DISTANCE`` for a dead end, ``None`` when
unknown), ``state_id`` (str or ``None``), ``dead_end`` (bool) and ``plan_commands`` (list[str]: commands that start
the env's winning plan from here — every shortest plan's first move in KeyDoor, the next step of TextWorld's
``policy_commands`` — empty when unknown). Policies see the oracle only when they declare ``uses_oracle``."""


@runtime_checkable
class TextEnv(Protocol):
    """A text environment with the Gymnasium 1.x five-tuple ``step``."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Start an episode; ``seed`` seeds the environment's own randomness (slips, ids), not the task."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Apply any string; returns (obs, reward, terminated, truncated, info)."""
        ...

    def close(self) -> None:
        """Release resources (a game interpreter, files). Idempotent."""
        ...


def check_info(info: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first required info key (or oracle key) that is missing or mistyped.

    Used by the conformance tests of every environment and by wrappers that build ``info`` themselves.
    """
    missing = [k for k in REQUIRED_INFO_KEYS if k not in info]
    if missing:
        raise ValueError(f"env info is missing required keys {missing}")
    cmds = info["admissible_commands"]
    if not isinstance(cmds, list) or not all(isinstance(c, str) for c in cmds):
        raise ValueError("info['admissible_commands'] must be a list of str")
    if list(cmds) != sorted(cmds):
        raise ValueError("info['admissible_commands'] must be sorted (a deterministic order)")
    for k in ("won", "lost", "invalid_action"):
        if not isinstance(info[k], bool):
            raise ValueError(f"info[{k!r}] must be bool, got {type(info[k]).__name__}")
    if not isinstance(info["task_id"], str) or not isinstance(info["feedback"], str):
        raise ValueError("info['task_id'] and info['feedback'] must be str")
    oracle = info[ORACLE_KEY]
    if not isinstance(oracle, Mapping) or any(k not in oracle for k in ORACLE_KEYS):
        raise ValueError(f"info['oracle'] must be a dict with keys {ORACLE_KEYS}")


# ---------------------------------------------------------------------------------------------------------------
# registry

EnvFactory = Callable[..., TextEnv]

_REGISTRY: dict[str, str | EnvFactory] = {}
_PREFIXES: dict[str, str] = {}
"""Spec prefixes (``"wm:"``) whose remainder is a path handed to a lazily imported factory."""


def register_prefix(prefix: str, factory: str) -> None:
    """Register a spec prefix such as ``"wm:"``: ``make("wm:<dir>", **kw)`` calls ``factory("<dir>", **kw)``.
    ``factory`` is a ``"module:attribute"`` path resolved on first use; a prefix registered twice raises."""
    if not prefix.endswith(":") or len(prefix) < 2:
        raise ValueError(f"a spec prefix must end with ':', got {prefix!r}")
    if prefix in _PREFIXES:
        raise ValueError(f"spec prefix {prefix!r} is already registered")
    if ":" not in factory:
        raise ValueError(f"a lazy factory must be 'module:attribute', got {factory!r}")
    _PREFIXES[prefix] = factory


def register(name: str, factory: str | EnvFactory) -> None:
    """Register an environment under an explicit ``name``.

    ``factory`` is a callable returning a :class:`TextEnv`, or a ``"module:attribute"`` path resolved lazily on
    :func:`make` (so that registering an optional backend costs no import). A name already registered raises
    ``ValueError``: two worlds silently sharing a name would make recorded results ambiguous.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"environment name must be a non-empty str, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"environment {name!r} is already registered")
    if isinstance(factory, str):
        if ":" not in factory:
            raise ValueError(f"a lazy factory must be 'module:attribute', got {factory!r}")
    elif not callable(factory):
        raise TypeError(f"factory must be callable or a 'module:attribute' string, got {type(factory).__name__}")
    _REGISTRY[name] = factory


def registered() -> list[str]:
    """The registered environment names, sorted."""
    return sorted(_REGISTRY)


def make(name: str, **kwargs: Any) -> TextEnv:
    """Build the environment registered as ``name`` with keyword arguments for its factory.

    ``make("keydoor-v0", layout_seed=3)``, ``make("keydoor-unique-v0", p=0.5)``,
    ``make("textworld-v0", game_file=path, max_steps=40)``; a registered prefix: ``make("wm:<dir>", layout_seed=3)``
    (a world model simulating KeyDoor, ``methods/world_model/simulator.py``).
    """
    for prefix, path in _PREFIXES.items():
        if name.startswith(prefix):
            mod, _, attr = path.partition(":")
            return getattr(importlib.import_module(mod), attr)(name[len(prefix):], **kwargs)
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown environment {name!r}; registered: {registered()}") from None
    if isinstance(factory, str):
        mod, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(mod), attr)
    return factory(**kwargs)


register("keydoor-v0", "agentmill.envs.keydoor:make_keydoor")
register("keydoor-unique-v0", "agentmill.envs.wrappers:make_keydoor_unique")
register("textworld-v0", "agentmill.envs.textworld_env:TextWorldEnv")
register("factsearch-v0", "agentmill.envs.factsearch:make_factsearch")
register("factsearch-stingy-v0", "agentmill.envs.factsearch:make_factsearch_stingy")
register_prefix("wm:", "agentmill.methods.world_model.simulator:make_wm_env")
