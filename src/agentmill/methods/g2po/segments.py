"""Per-segment statistics with ``np.bincount``: the vectorised core shared by the three estimators.

A *segment* is any partition of rows (a group's trajectories, an anchor group, a graph scope), given as integer
codes 0..n-1. ``np.bincount`` sums in input order, so results are bitwise reproducible and equal to a
left-to-right Python loop over the same rows.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np


def factorize(items: Iterable[Hashable]) -> tuple[np.ndarray, list[Hashable]]:
    """Integer codes in order of first appearance (deterministic: no hashing order, no uuid4) and the uniques."""
    index: dict[Hashable, int] = {}
    codes = [index.setdefault(x, len(index)) for x in items]
    return np.asarray(codes, dtype=np.int64), list(index)


def segment_mean_std(values: np.ndarray, seg: np.ndarray, n_seg: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, mean, unbiased std) per segment, each shape (n_seg,). std is 0 where count < 2; mean is 0 where
    count is 0. Two-pass variance (sum of squared deviations from the mean), as ``torch.std``."""
    count = np.bincount(seg, minlength=n_seg).astype(np.float64)
    total = np.bincount(seg, weights=values, minlength=n_seg)
    mean = np.divide(total, count, out=np.zeros(n_seg), where=count > 0)
    dev = values - mean[seg]
    ss = np.bincount(seg, weights=dev * dev, minlength=n_seg)
    std = np.sqrt(np.divide(ss, count - 1.0, out=np.zeros(n_seg), where=count > 1))
    return count, mean, std


def segment_constant(values: np.ndarray, seg: np.ndarray, n_seg: int) -> np.ndarray:
    """True for segments whose values are all exactly equal (or that are empty), shape (n_seg,).

    Used so that "all returns equal" gives advantages exactly 0: a float mean of equal values can differ from them
    in the last bit, which mean_std normalisation would otherwise blow up to ~1e-11 noise.
    """
    lo = np.full(n_seg, np.inf)
    hi = np.full(n_seg, -np.inf)
    np.minimum.at(lo, seg, values)
    np.maximum.at(hi, seg, values)
    return ~(lo < hi)


def standardize(values: np.ndarray, seg: np.ndarray, n_seg: int, norm: str, epsilon: float) -> np.ndarray:
    """Group-relative values: (x - mean_seg)/(std_seg + epsilon) for "mean_std", x - mean_seg for "mean".

    Segments of one row and segments whose values are all equal (std 0) give exactly 0, never NaN.
    """
    return standardize_against(values, seg, values, seg, n_seg, norm, epsilon)


def standardize_against(values: np.ndarray, seg: np.ndarray, pop: np.ndarray, pop_seg: np.ndarray, n_seg: int,
                        norm: str, epsilon: float) -> np.ndarray:
    """Like ``standardize``, with mean and std taken over a separate population ``pop`` (codes ``pop_seg``), e.g.
    each distinct edge once while the values are per step instance. A segment whose population has fewer than 2
    members or no spread gives exactly 0."""
    count, mean, std = segment_mean_std(pop, pop_seg, n_seg)
    if norm == "mean_std":
        out = (values - mean[seg]) / (std[seg] + epsilon)
    elif norm == "mean":
        out = values - mean[seg]
    else:
        raise ValueError(f"unknown norm {norm!r}; expected 'mean_std' or 'mean'")
    dead = (count < 2) | segment_constant(pop, pop_seg, n_seg)
    out[dead[seg]] = 0.0
    return out
