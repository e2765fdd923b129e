"""Train one policy per estimator on the same episodes and compare learning curves [R].

``train_compare`` is the driver of experiments G-5/G-6 (KeyDoor) and G-7 (TextWorld): for every seed and every
estimator (GRPO, GiGPO, G2PO-style (reconstructed)) it trains a fresh policy from ``policy_factory`` with the same
task order, the same group size and the same rollout seeds, so the arms differ only in how advantages are
computed. Rollout seeds are derived from (seed, iteration), so at iteration 0 - same initial policy - every arm sees
identical rollouts (common random numbers; the arms diverge as their policies do).

It records the sampled-policy success at each evaluation point (against iterations, episodes and env steps
consumed) and wall time per phase: rollout, graph building, advantages (graph included), update.

Policies: numpy policies with the ``envs.policies`` interface (``act``/``logprob``) are updated by
``envs.policies.pg_step``; a policy with its own ``pg_update(table, advantages, lr=..., normalize=...)`` (the LM arm
[R]: ``lm.policy.LoRACandidatePolicy``, CandidatePolicy + LoRA, AdamW, lr 1e-4) is updated by that method
instead. One loaded LM serves every arm with ``policy_factory=policy.reset`` (initial weights, fresh optimizer).
"""

from __future__ import annotations

import pickle
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.types import AdvantageResult, StepTable
from agentmill.envs.policies import pg_step
from agentmill.envs.rollout import collect_groups
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig, GRPOConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, grpo_advantages
from agentmill.methods.g2po.keys import StateKeyFn

ESTIMATORS = ("grpo", "gigpo", "g2po")


def _advantages(name: str, table: StepTable, key_fn: StateKeyFn, cfg: Any) -> AdvantageResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # low merge rates are expected under UniqueObs (G-6); they are logged
        if name == "grpo":
            return grpo_advantages(table, cfg or GRPOConfig())
        if name == "gigpo":
            return gigpo_advantages(table, key_fn, cfg or GiGPOConfig())
        return g2po_advantages(table, key_fn, cfg or G2POConfig())


@dataclass
class ArmLog:
    """One (estimator, seed) training run. Lists are per evaluation point unless named otherwise."""

    estimator: str
    seed: int
    lr: float
    eval_iteration: list[int] = field(default_factory=list)
    """Training iterations completed at each evaluation point (0 = before any update)."""
    eval_episodes: list[int] = field(default_factory=list)
    """Training episodes consumed at each evaluation point."""
    eval_env_steps: list[int] = field(default_factory=list)
    """Training env steps consumed at each evaluation point (arms differ here: better policies finish sooner)."""
    success: list[float] = field(default_factory=list)
    """Sampled-policy success rate at each evaluation point (fresh evaluation episodes, fixed seeds)."""
    train_success: list[float] = field(default_factory=list)
    """Success rate of each iteration's training rollouts (per iteration)."""
    merge_rate: list[float] = field(default_factory=list)
    """Graph merge rate of each iteration's table (g2po only; per iteration)."""
    seconds: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "graph": 0.0, "advantages": 0.0,
                                                                "update": 0.0, "eval": 0.0})
    """Wall time per phase, summed over iterations. "advantages" includes "graph"."""

    @property
    def auc(self) -> float:
        """Success AUC: the mean of the success curve over evaluation points (the G-5 metric)."""
        return float(np.mean(self.success)) if self.success else float("nan")


@dataclass
class TrainLog:
    """Every arm of one ``train_compare`` call."""

    arms: list[ArmLog]
    setup: dict[str, Any]

    def arm(self, estimator: str, seed: int) -> ArmLog:
        for a in self.arms:
            if a.estimator == estimator and a.seed == seed:
                return a
        raise KeyError(f"no arm ({estimator!r}, seed {seed})")

    def auc(self, estimator: str) -> np.ndarray:
        """Success AUC per seed, in ``setup["seeds"]`` order, shape (n_seeds,)."""
        return np.array([self.arm(estimator, s).auc for s in self.setup["seeds"]])

    def to_dict(self) -> dict[str, Any]:
        return {"setup": self.setup, "arms": [asdict(a) for a in self.arms]}


def _evaluate(env_factory: Callable[[Any], Any], policy: Any, tasks: Sequence[Any], episodes: int,
              max_steps: int | None, seed: int) -> float:
    per_task = max(1, -(-episodes // len(tasks)))
    table, _, _ = collect_groups(env_factory, policy, tasks, per_task, max_steps, seed=seed)
    return float(table.success[table.traj_starts].mean())


def _fingerprint(policy: Any) -> bytes | None:
    """The pickled state of a numpy policy, or None (LM policies, unpicklable ones).

    Two arms of one seed whose fresh policies pickle to the same bytes act identically, so their iteration-0
    evaluation and rollouts (same env seeds, same policy seeds) are the same numbers: the first arm's are reused
    instead of replayed (with 3 estimators that is 2/3 of the iteration-0 episodes, the longest ones, since an
    untrained policy rarely finishes early). LM policies (``pg_update``) are never reused: a forward pass need not
    be bitwise repeatable, and their state is too large to compare."""
    if callable(getattr(policy, "pg_update", None)):
        return None
    try:
        return pickle.dumps(policy, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - any pickling failure just disables the reuse
        return None


def _once(memo: dict[tuple[Any, ...], tuple[Any, float]], key: tuple[Any, ...] | None, policy: Any,
          compute: Callable[[], Any]) -> tuple[Any, float]:
    """``compute()`` and its wall time, or the stored pair for ``key`` (``key[0]``: the policy's fingerprint).

    A reused result is charged the time it took when computed, so per-phase seconds (and rates derived from them)
    mean what they meant without the reuse. A result is stored only if acting left the policy's pickle unchanged:
    an arm that reuses it skips those ``act`` calls, which must therefore have had no effect on the policy."""
    if key is not None and key in memo:
        return memo[key]
    t0 = time.perf_counter()
    out = (compute(), time.perf_counter() - t0)
    if key is not None and _fingerprint(policy) == key[0]:
        memo[key] = out
    return out


def train_compare(env_factory: Callable[[Any], Any], tasks: Sequence[Any], policy_factory: Callable[[], Any],
                  estimators: Sequence[str] = ESTIMATORS, key_fn: StateKeyFn | None = None, *, group_size: int = 8,
                  tasks_per_iter: int = 4, iterations: int, lr: float | Mapping[str, float], seeds: Sequence[int],
                  eval_every: int = 10, eval_episodes: int = 32, max_steps: int | None = None,
                  configs: Mapping[str, Any] | None = None, normalize: str = "trajectories",
                  eval_env_factory: Callable[[Any], Any] | None = None) -> TrainLog:
    """Train a fresh ``policy_factory()`` per (seed, estimator) for ``iterations`` iterations of ``tasks_per_iter``
    groups of ``group_size`` rollouts; evaluate every ``eval_every`` iterations and at the end.

    Args:
        env_factory, tasks, max_steps: as ``envs.rollout.collect_groups``.
        key_fn: state key for GiGPO and G2PO (required when either is among ``estimators``).
        lr: one step size, or one per estimator (each arm's lr is picked from a grid on dev seeds [R]).
        configs: estimator name -> its config (defaults: ``GRPOConfig()``, ``GiGPOConfig()``, ``G2POConfig()``).
        normalize: ``pg_step``'s gradient normalisation; "trajectories" (REINFORCE's per-episode sum) is the one the
            pre-registered lr grid {0.1, 0.3, 1.0} [R] fits on KeyDoor (measured by the envs author, see ``pg_step``).
        eval_env_factory: ``task -> TextEnv`` for the evaluation episodes (default ``env_factory``): train inside a
            simulator and evaluate in the real env (E167's sim-to-real comparison).
    Task order: iteration k of seed s trains on ``tasks_per_iter`` tasks drawn without replacement (cycling) from a
    permutation seeded by s alone, identical for every estimator. Evaluation episodes use seeds that depend only on
    (seed, evaluation point), never on the estimator.
    """
    unknown = sorted(set(estimators) - set(ESTIMATORS))
    if unknown:
        raise ValueError(f"train_compare: unknown estimators {unknown}; choose from {ESTIMATORS}")
    if key_fn is None and any(e != "grpo" for e in estimators):
        raise ValueError("train_compare: gigpo and g2po need a key_fn (e.g. keys.FieldsKey())")
    if iterations < 1 or tasks_per_iter < 1 or group_size < 1 or eval_every < 1 or eval_episodes < 1:
        raise ValueError("train_compare: iterations, tasks_per_iter, group_size, eval_every and eval_episodes must "
                         "be >= 1")
    if not tasks:
        raise ValueError("train_compare: no tasks")
    lrs = {e: float(lr[e] if isinstance(lr, Mapping) else lr) for e in estimators}
    eval_factory = eval_env_factory if eval_env_factory is not None else env_factory
    configs = dict(configs or {})
    arms: list[ArmLog] = []
    for seed in seeds:
        perm_rng = np.random.default_rng(derive_seed(seed, "g2po-train-tasks"))
        order = np.concatenate([perm_rng.permutation(len(tasks))
                                for _ in range(-(-iterations * tasks_per_iter // len(tasks)))])
        memo: dict[tuple[Any, ...], tuple[Any, float]] = {}  # iteration-0 results of this seed (see _fingerprint)
        for est in estimators:
            policy = policy_factory()
            initial = _fingerprint(policy)
            log = ArmLog(est, int(seed), lrs[est])
            episodes = env_steps = 0
            for it in range(iterations + 1):
                reuse = it == 0 and initial is not None
                if it % eval_every == 0 or it == iterations:
                    success, dt = _once(memo, (initial, "eval") if reuse else None, policy, partial(
                        _evaluate, eval_factory, policy, tasks, eval_episodes, max_steps,
                        derive_seed(seed, "g2po-eval", it)))
                    log.success.append(success)
                    log.seconds["eval"] += dt
                    log.eval_iteration.append(it)
                    log.eval_episodes.append(episodes)
                    log.eval_env_steps.append(env_steps)
                if it == iterations:
                    break
                batch = [tasks[i] for i in order[it * tasks_per_iter:(it + 1) * tasks_per_iter]]
                (table, _, _), rollout_s = _once(memo, (initial, "train") if reuse else None, policy, partial(
                    collect_groups, env_factory, policy, batch, group_size, max_steps,
                    seed=derive_seed(seed, "g2po-train", it)))
                t1 = time.perf_counter()
                res = _advantages(est, table, key_fn, configs.get(est))  # type: ignore[arg-type]
                t2 = time.perf_counter()
                upd = getattr(policy, "pg_update", None)
                if callable(upd):  # LM arm: autograd policy gradient with its own optimizer (AdamW)
                    upd(table, res.advantages, lr=lrs[est], normalize=normalize)
                else:
                    pg_step(policy, table, res.advantages, lrs[est], normalize=normalize)
                t3 = time.perf_counter()
                log.seconds["rollout"] += rollout_s
                log.seconds["advantages"] += t2 - t1
                log.seconds["graph"] += res.diagnostics.get("build_seconds", 0.0)
                log.seconds["update"] += t3 - t2
                episodes += table.n_trajectories
                env_steps += len(table)
                log.train_success.append(float(table.success[table.traj_starts].mean()))
                if "merge_rate" in res.diagnostics and est == "g2po":
                    log.merge_rate.append(res.diagnostics["merge_rate"])
            arms.append(log)
    setup = {"estimators": list(estimators), "seeds": [int(s) for s in seeds], "group_size": group_size,
             "tasks_per_iter": tasks_per_iter, "iterations": iterations, "lr": lrs, "eval_every": eval_every,
             "eval_episodes": eval_episodes, "max_steps": max_steps, "normalize": normalize, "n_tasks": len(tasks),
             "configs": {k: repr(v) for k, v in configs.items()}, "key_fn": repr(key_fn)}
    return TrainLog(arms, setup)
