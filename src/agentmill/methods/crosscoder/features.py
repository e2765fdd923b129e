"""Ranking latents by how they separate two prompt sets (E175's selection rule [P]).

Per latent i, on codes of the rows to compare (last prompt token unless stated): means and standard deviations on
the positive ("tool") and negative ("generic") rows, Cohen's d = (μ_pos − μ_neg) / sqrt((σ²_pos + σ²_neg) / 2)
(zeros included), AUROC (Mann–Whitney, ties ½) and firing rates. E175's selection: among the block's latents with
μ_pos > μ_neg (n of them), keep the top max(1, ⌈k% · n⌉) by d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FeatureTable:
    index: np.ndarray
    """Latent ids, sorted by Cohen's d (descending)."""
    cohen_d: np.ndarray
    auroc: np.ndarray
    mean_pos: np.ndarray
    mean_neg: np.ndarray
    fire_pos: np.ndarray
    fire_neg: np.ndarray

    def top(self, k_percent: float = 100.0) -> list[int]:
        """E175's rule: of the latents with μ_pos > μ_neg, the top max(1, ⌈k% · n⌉) by d."""
        up = self.index[self.mean_pos > self.mean_neg]
        if up.size == 0:
            return []
        return [int(i) for i in up[:max(1, math.ceil(k_percent / 100 * up.size))]]


def _auroc_columns(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Mann–Whitney AUROC per column (ties count ½)."""
    out = np.empty(pos.shape[1])
    n1, n0 = len(pos), len(neg)
    for j in range(pos.shape[1]):
        allv = np.concatenate([pos[:, j], neg[:, j]])
        order = allv.argsort(kind="mergesort")
        ranks = np.empty(len(allv))
        sv = allv[order]
        # average ranks over ties
        uniq, start, counts = np.unique(sv, return_index=True, return_counts=True)
        avg = start + (counts + 1) / 2.0
        ranks[order] = np.repeat(avg, counts)
        out[j] = (ranks[:n1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)
    return out


def rank_features(codes_pos: np.ndarray, codes_neg: np.ndarray, latents: np.ndarray | slice | None = None
                  ) -> FeatureTable:
    """Rank the ``latents`` (default: all) of codes (n, D) by Cohen's d between the positive and negative rows."""
    if len(codes_pos) < 2 or len(codes_neg) < 2:
        raise ValueError("rank_features needs at least 2 rows on each side")
    D = codes_pos.shape[1]
    idx = np.arange(D)[latents] if latents is not None else np.arange(D)
    p, n = codes_pos[:, idx].astype(np.float64), codes_neg[:, idx].astype(np.float64)
    mp, mn = p.mean(0), n.mean(0)
    pooled = np.sqrt((p.var(0, ddof=1) + n.var(0, ddof=1)) / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.where(pooled > 0, (mp - mn) / pooled, 0.0)
    order = np.argsort(-d, kind="mergesort")
    au = _auroc_columns(p[:, order], n[:, order])
    return FeatureTable(idx[order], d[order], au, mp[order], mn[order], (p > 0).mean(0)[order],
                        (n > 0).mean(0)[order])
