"""Streaming collapse telemetry for any trainer (E162; metric keys in the tree_rollouts README): what share of groups
carries no signal, which prompts are an empty (or full) lake, and how much of the budget goes there.

    monitor = CollapseMonitor()
    reward_fn = monitor.wrap_reward_fn(my_reward_fn, group_size=8)     # a TRL reward function, rows grouped by G
    ...
    trainer.log(monitor.summary())                                      # collapse/* keys

Keys: ``collapse/rate`` (groups with zero reward spread, tolerance 1e-6), ``collapse/all_success``,
``collapse/all_fail``, ``collapse/mixed_ratio``, ``collapse/lake_fit_z0`` and ``collapse/lake_fit_z1`` (the
empirical-Bayes mixture over per-prompt cumulative counts, NaN below 8 prompts), ``collapse/empty_lake_prompts``
(prompts flagged by the Jeffreys-bound detector), ``collapse/budget_on_empty_lake`` (share of all scored samples
spent on those prompts).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from agentmill.core.records import write_text_atomic
from agentmill.methods.tree_rollouts.allocate import EmptyLakeDetector
from agentmill.methods.tree_rollouts.collapse import ZERO_STD_TOL, fit_pool_mixture, group_stats


class CollapseMonitor:
    def __init__(self, *, zero_std_tol: float = ZERO_STD_TOL, success_threshold: float = 0.5,
                 p_floor: float = 0.02) -> None:
        self.tol, self.threshold = zero_std_tol, success_threshold
        self.groups: list[dict[str, Any]] = []
        self.counts: dict[str, list[int]] = {}        # prompt -> [successes, scored samples], cumulative
        self.detector = EmptyLakeDetector(p_floor=p_floor, decay=1.0)

    def observe(self, prompt_key: str, rewards: Sequence[float | None]) -> None:
        """One group of rewards for one prompt (None = unscorable, excluded)."""
        st = group_stats(list(rewards), [0] * len(rewards), zero_std_tol=self.tol,
                         success_threshold=self.threshold)
        scored = [float(r) for r in rewards if r is not None]
        k = sum(r > self.threshold for r in scored)
        row = {"prompt": str(prompt_key), "n": len(scored), "k": k, "collapsed": bool(st.zero_std[0]),
               "all_success": bool(st.all_success[0]), "all_fail": bool(st.all_fail[0])}
        self.groups.append(row)
        c = self.counts.setdefault(str(prompt_key), [0, 0])
        c[0] += k
        c[1] += len(scored)
        if scored:
            self.detector.observe(str(prompt_key), k, len(scored))

    def wrap_reward_fn(self, fn: Callable[..., list], group_size: int) -> Callable[..., list]:
        """A TRL reward function that also observes its rewards, rows grouped in blocks of ``group_size``
        consecutive rows (TRL's RepeatSampler order)."""
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {group_size}")

        def wrapped(prompts: list, completions: list, **kwargs: Any) -> list:
            rewards = fn(prompts=prompts, completions=completions, **kwargs)
            if len(rewards) % group_size:
                raise ValueError(f"{len(rewards)} rewards are not whole groups of {group_size}")
            for start in range(0, len(rewards), group_size):
                p = prompts[start]
                key = p if isinstance(p, str) else json.dumps(p, sort_keys=True)
                self.observe(key, rewards[start: start + group_size])
            return rewards

        wrapped.__name__ = getattr(fn, "__name__", "reward")
        return wrapped

    def summary(self) -> dict[str, float]:
        n = max(len(self.groups), 1)
        out = {"collapse/rate": sum(g["collapsed"] for g in self.groups) / n,
               "collapse/all_success": sum(g["all_success"] for g in self.groups) / n,
               "collapse/all_fail": sum(g["all_fail"] for g in self.groups) / n}
        out["collapse/mixed_ratio"] = 1.0 - out["collapse/rate"] if self.groups else 0.0
        counts = [(k, m) for k, m in self.counts.values() if m > 0]
        z0 = z1 = math.nan
        if len(counts) >= 8:
            fit = fit_pool_mixture(counts)
            z0, z1 = fit.z0, fit.z1
        out["collapse/lake_fit_z0"], out["collapse/lake_fit_z1"] = z0, z1
        empty = [p for p in self.counts if self.detector.status(p) == "empty"]
        total = sum(m for _, m in self.counts.values())
        out["collapse/empty_lake_prompts"] = float(len(empty))
        out["collapse/budget_on_empty_lake"] = sum(self.counts[p][1] for p in empty) / total if total else 0.0
        return out

    def to_jsonl(self, path: str | Path) -> None:
        """One line per observed group (prompt, n, k, flags), written atomically."""
        write_text_atomic(path, "".join(json.dumps(g) + "\n" for g in self.groups))
