"""Separability along the trace: per-position probe AUROC over trace fractions, and the valley depth [R].

``D = min(AUROC(think_open), AUROC(frac:1.0)) − min_{φ ∈ [0.3, 0.7]} AUROC(φ)``, with a paired bootstrap over
templates: one resample of test templates re-evaluates every φ with the test scores fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentmill.core.stats import Estimate, auroc, percentile_estimate


@dataclass
class ValleyCurve:
    fractions: list[float]
    auroc: list[float]
    depth: Estimate
    layer: int


def valley_depth(scores: np.ndarray, y: np.ndarray, groups: np.ndarray, fractions: Sequence[float], *,
                 n_boot: int = 1000, seed: int = 0, start_scores: np.ndarray | None = None) -> tuple[list[float], Estimate]:
    """``scores`` [N, F] test scores per fraction (NaN where missing; ``fractions[0]`` must be 0.0 unless
    ``start_scores`` [N] gives the ``think_open`` scores) → (AUROC per fraction, depth estimate)."""
    fr = np.asarray(fractions, dtype=float)
    mid = (fr >= 0.3) & (fr <= 0.7)
    if not mid.any() or not np.isclose(fr[-1], 1.0):
        raise ValueError("valley needs fractions in [0.3, 0.7] and the end (1.0)")
    cols = [scores[:, j] for j in range(scores.shape[1])]
    start = start_scores if start_scores is not None else cols[0]

    def auc_rows(s: np.ndarray, rows: np.ndarray) -> float:
        r = rows[~np.isnan(s[rows])]
        return auroc(s[r], y[r]) if len(np.unique(y[r])) == 2 else float("nan")

    def depth(rows: np.ndarray) -> float:
        a = [auc_rows(c, rows) for c in cols]
        ends = min(auc_rows(start, rows), a[-1])
        return float(ends - np.nanmin(np.array(a)[mid]))

    all_rows = np.arange(len(y))
    curve = [auc_rows(c, all_rows) for c in cols]
    uniq, codes = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(codes == i) for i in range(uniq.size)]
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, uniq.size, uniq.size)
        boots[b] = depth(np.concatenate([members[i] for i in pick]))
    return curve, percentile_estimate(depth(all_rows), boots, n=int(uniq.size), method="paired_cluster_bootstrap")
