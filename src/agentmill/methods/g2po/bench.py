"""Micro-benchmark of the estimators on one StepTable: where the bookkeeping time goes (project targets PERF-2/PERF-4
[R]).

The lead's benchmark script and experiment G-9 (``e165.g2po_overhead``) call ``time_estimators``; the ratio to
rollout time is theirs to compute. Median of ``repeats`` runs after one warm-up, wall clock, single process.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import numpy as np

from agentmill.core.types import StepTable
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, grpo_advantages
from agentmill.methods.g2po.graph import build_state_graph, key_codes
from agentmill.methods.g2po.keys import StateKeyFn


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def time_estimators(table: StepTable, key_fn: StateKeyFn, *, repeats: int = 3,
                    g2po: G2POConfig = G2POConfig(), gigpo: GiGPOConfig = GiGPOConfig()) -> dict[str, float]:
    """Median wall seconds of: the key pass alone (``keys_s``), ``build_state_graph`` (``graph_s``), and each
    estimator end to end (``g2po_s``, ``gigpo_s``, ``grpo_s``); plus ``*_ms_per_1k`` for each and ``n_rows``."""
    if repeats < 1:
        raise ValueError(f"time_estimators: repeats must be >= 1, got {repeats}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # low-merge-rate warnings are not what is being timed
        out = {
            "keys_s": _median_seconds(lambda: key_codes(table, key_fn), repeats),
            "graph_s": _median_seconds(lambda: build_state_graph(table, key_fn, gamma=g2po.gamma, visit=g2po.visit,
                                                                 truncation=g2po.truncation), repeats),
            "g2po_s": _median_seconds(lambda: g2po_advantages(table, key_fn, g2po), repeats),
            "gigpo_s": _median_seconds(lambda: gigpo_advantages(table, key_fn, gigpo), repeats),
            "grpo_s": _median_seconds(lambda: grpo_advantages(table), repeats),
        }
    n = len(table)
    out.update({k.replace("_s", "_ms_per_1k"): v * 1e6 / n for k, v in list(out.items())})
    out["n_rows"] = float(n)
    return out
