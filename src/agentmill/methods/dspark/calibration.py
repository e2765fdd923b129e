"""Confidence metrics and sequential temperature scaling (STS) of the confidence head (arXiv:2607.05147 [A]; metrics as
DeepSpec [C]).

The scheduler multiplies step confidences into prefix survivals ``a_k = ∏_{i≤k} c_i`` and then into an expected
acceptance length, so their *absolute* calibration matters, not only their ranking. STS fits one temperature per
position, left to right, each minimising the ECE of the survival with the earlier temperatures frozen (the paper
describes STS; there is no public code: the grid is this project's choice [R]). Temperature scaling keeps the
ranking, so AUROC does not move.

Labels come only from rounds verified in full (ℓ = γ): under a scheduler, the labels beyond ℓ are unobserved and
missing not at random (censoring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentmill.core.calibration import ece as core_ece
from agentmill.core.stats import auroc

STS_GRID = np.geomspace(0.2, 5.0, 97)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def ece(pred: np.ndarray, labels: np.ndarray, bins: int = 20) -> float:
    """Expected calibration error over ``bins`` equal-width bins (``core.calibration.ece``; DSpark's default is 20
    bins)."""
    return core_ece(pred, labels, bins)


def prefix_labels(accepted: Sequence[int], gamma: int) -> np.ndarray:
    """``y[n, k] = 1`` iff draft positions 1..k+1 were all accepted in round n."""
    acc = np.asarray(accepted)[:, None]
    return (np.arange(gamma)[None] < acc).astype(float)


def survival(conf_logits: np.ndarray, temps: np.ndarray | None = None) -> np.ndarray:
    z = np.asarray(conf_logits, float)
    t = np.ones(z.shape[1]) if temps is None else np.asarray(temps, float)[: z.shape[1]]
    return np.cumprod(sigmoid(z / t), axis=1)


def confidence_metrics(pred: np.ndarray, labels: np.ndarray, bins: int = 20) -> dict[str, Any]:
    """Per-position ECE, AUROC and Brier of survivals ``pred [n, γ]`` against prefix labels, and their
    count-weighted means (ECE, Brier: rounds; AUROC: surviving prefixes, over positions where both classes occur:
    the core :func:`~agentmill.core.stats.auroc` is NaN at a position with one class)."""
    pred, labels = np.asarray(pred, float), np.asarray(labels, float)
    g = pred.shape[1]
    per = {"ece": [], "auroc": [], "brier": [], "n": [], "positives": []}
    for k in range(g):
        p, y = pred[:, k], labels[:, k]
        per["ece"].append(ece(p, y, bins))
        per["auroc"].append(auroc(p, y))
        per["brier"].append(float(np.mean((p - y) ** 2)))
        per["n"].append(len(p))
        per["positives"].append(int(y.sum()))
    n = np.asarray(per["n"], float)
    pos = np.asarray(per["positives"], float)
    au = np.asarray(per["auroc"])
    ok = ~np.isnan(au)
    # AUROC is averaged with weights = positives per position: deep positions have a handful of surviving prefixes
    # (e.g. 4 and 1 of 968 rounds), and with equal weights a shuffled control scattered with SD 0.085 around 0.5
    return {"per_position": per,
            "ece": float(np.average(per["ece"], weights=n)),
            "brier": float(np.average(per["brier"], weights=n)),
            "auroc": float(np.average(au[ok], weights=pos[ok])) if ok.any() and pos[ok].sum() else float("nan")}


def calibrate_sts(conf_logits: np.ndarray, accepted: Sequence[int], grid: np.ndarray = STS_GRID,
                  bins: int = 20) -> np.ndarray:
    """Temperatures ``T_1..T_γ`` fitted position by position on full-verification rounds (``conf_logits [n, γ]``,
    ``accepted [n]``): ``T_k = argmin_T ECE(∏_{i<k} σ(z_i/T_i) · σ(z_k/T), y_k)``."""
    z = np.asarray(conf_logits, float)
    if z.ndim != 2 or len(z) == 0:
        raise ValueError("conf_logits must be a non-empty [rounds, γ] array")
    g = z.shape[1]
    y = prefix_labels(accepted, g)
    temps = np.ones(g)
    prefix = np.ones(len(z))
    for k in range(g):
        errs = [ece(prefix * sigmoid(z[:, k] / t), y[:, k], bins) for t in grid]
        temps[k] = float(grid[int(np.argmin(errs))])
        prefix = prefix * sigmoid(z[:, k] / temps[k])
    return temps
