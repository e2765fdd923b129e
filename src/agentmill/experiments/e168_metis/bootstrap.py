"""The Metis experiments' interval: a paired two-stage bootstrap, seeds then tasks (vectorised).

Arms run on the same task sequence per seed, so their rows pair by (seed, task). Each replicate draws seeds with
replacement and, inside each drawn seed, tasks with replacement; every statistic sees the same draw, so differences
and ratios of arms are paired. Same scheme as :func:`agentmill.core.stats.two_stage_bootstrap`, vectorised over
equal-length task lists (the stream runs have equal lengths by construction)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from agentmill.core.stats import Estimate, percentile_estimate

Stat = Callable[[Mapping[str, np.ndarray]], np.ndarray]
"""Arrays shaped [B, S, T] (or [S, T] for the point) → one value per leading index (reduce over the last two
axes)."""


def paired_two_stage(arrays: Mapping[str, np.ndarray], stat: Stat, *, n_boot: int = 2000, seed: int = 0
                     ) -> Estimate:
    """``arrays``: name → [S, T] per-(seed, task) values. The point value is ``stat`` on the arrays as they are."""
    first = next(iter(arrays.values()))
    S, T = first.shape
    with np.errstate(invalid="ignore", divide="ignore"):
        value = float(stat({k: v[None] for k, v in arrays.items()})[0])
        rng = np.random.default_rng(seed)
        boots = np.empty(n_boot)
        chunk = max(1, 200_000 // max(1, S * T))
        for lo in range(0, n_boot, chunk):
            b = min(chunk, n_boot - lo)
            si = rng.integers(0, S, size=(b, S))
            ti = rng.integers(0, T, size=(b, S, T))
            g = {k: v[si[:, :, None], ti] for k, v in arrays.items()}
            boots[lo:lo + b] = stat(g)
    return percentile_estimate(value, boots, n=S, method="two_stage_cluster_bootstrap")


def masked_mean(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Mean of ``x`` where ``m`` over the last two axes (NaN where the mask is empty)."""
    return (x * m).sum(axis=(-1, -2)) / m.sum(axis=(-1, -2))
