"""Collect groups of rollouts into step tables (E165/E173; docs/methods/g2po.md).

A group is N rollouts of one task: the unit over which GRPO, GiGPO and G2PO compare returns. ``collect_groups``
plays them and returns

- a :class:`~agentmill.core.types.StepTable` (what estimators see: observations, info *without* the oracle,
  actions, candidates, rewards, end kinds, success),
- a :class:`~agentmill.core.types.LabelTable` in the same row order (the oracle's distance-to-goal labels, for
  evaluation only),
- the same episodes as :class:`~agentmill.core.types.Trajectory` objects (for the lm layer and reports).

Privileged state never reaches the StepTable: ``info["oracle"]`` is moved into the labels, and a policy sees it
only when it declares ``uses_oracle = True`` (the ε-oracle behaviour policy of experiments G-1..G-3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agentmill.core.seeding import derive_seed, rng_for
from agentmill.core.types import (END_CONTINUES, END_TERMINATED, END_TRUNCATED, LabelTable, Step, StepTable,
                                  Trajectory)
from agentmill.envs.base import ORACLE_KEY, TextEnv


@runtime_checkable
class Policy(Protocol):
    """A policy over text actions [R].

    ``act`` returns the chosen action and its log-probability under the policy; ``logprob`` scores any action.
    ``info`` is the env's info without the oracle unless the policy sets ``uses_oracle = True``.
    """

    def act(self, obs: str, info: Mapping[str, Any], rng: np.random.Generator) -> tuple[str, float]: ...

    def logprob(self, obs: str, info: Mapping[str, Any], action: str) -> float: ...


def _admissible(info: Mapping[str, Any]) -> list[str]:
    cmds = list(info.get("admissible_commands") or ())
    if not cmds:
        raise ValueError("the policy chooses among info['admissible_commands'], which is empty")
    return cmds


class RandomPolicy:
    """Uniform over the admissible commands."""

    uses_oracle = False

    def act(self, obs: str, info: Mapping[str, Any], rng: np.random.Generator) -> tuple[str, float]:
        cmds = _admissible(info)
        return cmds[int(rng.integers(len(cmds)))], -math.log(len(cmds))

    def logprob(self, obs: str, info: Mapping[str, Any], action: str) -> float:
        cmds = _admissible(info)
        return -math.log(len(cmds)) if action in cmds else -math.inf


class EpsilonOraclePolicy:
    """With probability 1 − ε a uniformly chosen command of the oracle's plan (``oracle["plan_commands"]``), else
    uniform over all admissible commands; uniform when the plan is unknown or empty (won, dead end).

    π(a|s) = (1 − ε)·1[a ∈ plan]/|plan| + ε/|admissible|. It reads the oracle, so it is a behaviour policy for
    studying estimators (experiments G-1 to G-3, ε = 0.5 in G-1), never a learner.
    """

    uses_oracle = True

    def __init__(self, epsilon: float = 0.5) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon = float(epsilon)

    def _plan(self, info: Mapping[str, Any], cmds: list[str]) -> list[str]:
        oracle = info.get(ORACLE_KEY)
        if oracle is None:
            raise ValueError("EpsilonOraclePolicy needs info['oracle'] (collect_groups passes it to policies "
                             "with uses_oracle = True)")
        return [c for c in oracle.get("plan_commands") or () if c in cmds]

    def probs(self, info: Mapping[str, Any]) -> dict[str, float]:
        """π(·|s) over the admissible commands."""
        cmds = _admissible(info)
        plan = self._plan(info, cmds)
        eps = self.epsilon if plan else 1.0
        out = {c: eps / len(cmds) for c in cmds}
        for c in plan:
            out[c] += (1.0 - eps) / len(plan)
        return out

    def act(self, obs: str, info: Mapping[str, Any], rng: np.random.Generator) -> tuple[str, float]:
        cmds = _admissible(info)
        plan = self._plan(info, cmds)
        if plan and rng.random() >= self.epsilon:
            a = plan[int(rng.integers(len(plan)))]
        else:
            a = cmds[int(rng.integers(len(cmds)))]
        return a, math.log(self.probs(info)[a])

    def logprob(self, obs: str, info: Mapping[str, Any], action: str) -> float:
        p = self.probs(info).get(action, 0.0)
        return math.log(p) if p > 0 else -math.inf


def _strip(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != ORACLE_KEY}


def _distance(info: Mapping[str, Any]) -> int:
    d = (info.get(ORACLE_KEY) or {}).get("distance_to_goal")
    return -1 if d is None else int(d)


def collect_groups(env_factory: Callable[[Any], TextEnv], policy: Policy, tasks: Sequence[Any], group_size: int = 8,
                   max_steps: int | None = None, seed: int = 0, *, out: str | Path | None = None,
                   env_name: str | None = None, meta: Mapping[str, Any] | None = None,
                   ) -> tuple[StepTable, LabelTable, list[Trajectory]]:
    """Play ``group_size`` rollouts of each task with ``policy``; one group per entry of ``tasks``.

    Args:
        env_factory: ``task -> TextEnv``; called once per group (one env per TextWorld game), closed after it.
        policy: a :class:`Policy`. It gets ``info`` without the oracle unless it sets ``uses_oracle = True``.
        tasks: anything ``env_factory`` accepts (KeyDoor layouts, game files). A task listed twice gives two
            groups with different seeds.
        group_size: rollouts per group (N; 8 is GiGPO's setting [C]).
        max_steps: stop a rollout after this many steps (truncated) if the env has not ended it; ``None`` leaves
            it to the env's own limit.
        seed: rollout ``i`` of the ``k``-th task resets the env with ``derive_seed(seed, "env", k, i)`` and draws
            its actions from ``rng_for(seed, "policy", k, i)``: independent of execution order.
        out: append one ``agentmill.rollout/1`` JSON line per trajectory to this file after each completed group
            (flushed and fsynced, so an interrupted run loses at most the group in flight).
        env_name, meta: recorded in the JSONL lines (``env``, ``meta``).

    Returns ``(steps, labels, trajectories)``. Ids: ``group_id = f"{task_id}@{seed}/{k}"``, ``traj_id =
    f"r{i}"``. The StepTable's ``candidates`` hold the admissible commands the policy chose among (``None`` when
    the policy sets ``free_text = True``). Labels: ``dist_before``/``dist_after`` from ``oracle.distance_to_goal``
    (−1 when unknown), ``progress`` and ``dead_end`` as in ``LabelTable.from_distances``.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
    if not len(tasks):
        raise ValueError("collect_groups: no tasks")
    sees_oracle = bool(getattr(policy, "uses_oracle", False))
    free_text = bool(getattr(policy, "free_text", False))
    tables: list[StepTable] = []
    labels: list[LabelTable] = []
    trajectories: list[Trajectory] = []
    for k, task in enumerate(tasks):
        env = env_factory(task)
        try:
            cols: dict[str, list[Any]] = {n: [] for n in ("group_id", "traj_id", "t", "obs", "next_obs", "info",
                                                          "next_info", "action", "candidates", "reward", "end",
                                                          "success")}
            before: list[int] = []
            after: list[int] = []
            fields: dict[tuple[str, str], dict[str, Any]] = {}
            for i in range(group_size):
                env_seed = derive_seed(seed, "env", k, i)
                rng = rng_for(seed, "policy", k, i)
                obs, info = env.reset(seed=env_seed)
                task_id = str(info.get("task_id", k))
                gid, tid = f"{task_id}@{seed}/{k}", f"r{i}"
                steps: list[Step] = []
                t, done, end, ret = 0, False, END_CONTINUES, 0.0
                while not done:
                    seen = info if sees_oracle else _strip(info)
                    action, _ = policy.act(obs, seen, rng)
                    nobs, reward, terminated, truncated, ninfo = env.step(action)
                    t += 1
                    if not (terminated or truncated) and max_steps is not None and t >= max_steps:
                        truncated = True
                    done = bool(terminated or truncated)
                    end = END_TERMINATED if terminated else (END_TRUNCATED if done else END_CONTINUES)
                    clean = _strip(info)
                    cols["group_id"].append(gid)
                    cols["traj_id"].append(tid)
                    cols["t"].append(t - 1)
                    cols["obs"].append(obs)
                    cols["next_obs"].append(nobs)
                    cols["info"].append(clean)
                    cols["next_info"].append(_strip(ninfo))
                    cols["action"].append(action)
                    cols["candidates"].append(None if free_text else tuple(info.get("admissible_commands") or ()))
                    cols["reward"].append(float(reward))
                    cols["end"].append(end)
                    before.append(_distance(info))
                    after.append(_distance(ninfo))
                    steps.append(Step(observation=obs, action=action, reward=float(reward), info=clean))
                    ret += float(reward)
                    obs, info = nobs, ninfo
                success = bool(info.get("won", False))
                cols["success"].extend([success] * len(steps))
                fields[(gid, tid)] = {"task_id": task_id, "env": env_name or type(env).__name__, "seed": env_seed,
                                      "meta": dict(meta or {})}
                trajectories.append(Trajectory(steps=tuple(steps), reward=ret, meta={
                    "group_id": gid, "traj_id": tid, "task_id": task_id, "seed": env_seed, "success": success,
                    "end": "terminated" if end == END_TERMINATED else "truncated", "final_obs": obs}))
        finally:
            env.close()
        table = StepTable(**cols)
        lab = LabelTable.from_distances(before, after)
        if out is not None:
            table.to_jsonl(str(out), labels=lab, traj_fields=fields, append=True)
        tables.append(table)
        labels.append(lab)
    return StepTable.concat(tables), LabelTable.concat(labels), trajectories

