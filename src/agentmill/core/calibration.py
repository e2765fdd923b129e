"""Scores of a confidence against binary outcomes: prediction-rejection ratio, Brier score, expected calibration error.

Point values only; wrap them in :func:`agentmill.core.stats.cluster_bootstrap` for an interval over instances.
The AUROC lives in :mod:`agentmill.core.stats` (``auroc``). numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _pair(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=float)
    if s.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"scores and labels must be 1-D of equal length, got {s.shape} and {y.shape}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN; drop or impute them first (and report how many)")
    return s, y


def rejection_curve(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> np.ndarray:
    """Q(ρ) for ρ = 0, 1/n, …, (n−1)/n: the mean label of the candidates kept after rejecting the ``ρ·n`` with the
    lowest scores. Ties in the score are averaged (the kept mean over a tie block is interpolated), so the curve does
    not depend on the input order.
    """
    s, y = _pair(scores, labels)
    n = s.size
    order = np.argsort(-s, kind="stable")
    ys = y[order]
    ss = s[order]
    # average labels within each tie block so the order inside a block does not matter
    _, start, counts = np.unique(-ss, return_index=True, return_counts=True)
    for st, c in zip(start, counts):
        if c > 1:
            ys[st:st + c] = ys[st:st + c].mean()
    kept_sums = np.cumsum(ys)  # keep the top m = 1..n
    m = np.arange(1, n + 1)
    q_keep = kept_sums / m  # Q when keeping the top m, i.e. rejecting n − m
    return q_keep[::-1].copy()  # index i ↔ ρ = i/n (reject i lowest)


def _area(q: np.ndarray) -> float:
    if q.size == 1:
        return float(q[0])
    x = np.arange(q.size) / q.size
    return float(np.sum((q[1:] + q[:-1]) / 2 * np.diff(x)))


def prr(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Prediction-rejection ratio (A_score − A_random) / (A_oracle − A_random).

    A is the trapezoid area under the rejection curve Q(ρ), ρ = 0, 1/n, …, (n−1)/n (:func:`rejection_curve`);
    the random curve is flat at the mean label; the oracle rejects the wrong candidates first. A perfect score
    gives 1, a random one about 0, a reversed one about −1. NaN when every label is equal (the oracle equals random)
    or n = 0, so a bootstrap drops such a resample.
    """
    s, y = _pair(scores, labels)
    if s.size == 0 or y.min() == y.max():
        return math.nan
    a_score = _area(rejection_curve(s, y))
    a_oracle = _area(rejection_curve(y, y))
    a_random = float(y.mean()) * (s.size - 1) / s.size  # the flat curve over [0, (n−1)/n]
    return (a_score - a_random) / (a_oracle - a_random)


def brier(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Mean squared error of probabilities against 0/1 labels; NaN for n = 0."""
    p, y = _pair(probs, labels)
    if p.size == 0:
        return math.nan
    if (p < 0).any() or (p > 1).any():
        raise ValueError("brier needs probabilities in [0, 1]")
    return float(np.mean((p - y) ** 2))


def ece(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray, bins: int = 10) -> float:
    """Expected calibration error over ``bins`` equal-width bins: Σ_b (n_b/N)·|mean prob − mean label|.

    A probability of exactly 1 falls in the last bin. NaN for n = 0.
    """
    p, y = _pair(probs, labels)
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    if p.size == 0:
        return math.nan
    if (p < 0).any() or (p > 1).any():
        raise ValueError("ece needs probabilities in [0, 1]")
    idx = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in np.unique(idx):
        m = idx == b
        total += m.sum() * abs(p[m].mean() - y[m].mean())
    return float(total / p.size)


def reliability_bins(probs: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                     bins: int = 10) -> list[tuple[float, float, int]]:
    """``(mean prob, mean label, count)`` per non-empty equal-width bin, for a reliability diagram."""
    p, y = _pair(probs, labels)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    return [(float(p[idx == b].mean()), float(y[idx == b].mean()), int((idx == b).sum())) for b in np.unique(idx)]
