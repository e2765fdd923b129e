"""Jensen-Shannon divergence between two theories' simulated choices (the repository's JSD gate
[C `src/jsd.py`, `configs/jsd_threshold.json`], and the recovery metrics [C `scripts/jsd_recovery.py`]).

Each theory's simulated subjects are pooled, which marginalises its parameters. *Static* JSD compares the per-trial
Bernoulli choice marginals; *sequence* JSD compares the lag-1 joint distribution of (previous, current) response
over 4 outcomes. Both are averaged over trials, in nats (≤ ln 2).

Trial alignment [R]: the repository shuffles once per design, so trial position t is the same stimulus for every
subject. Here schedules are shuffled per subject [R], so "per trial" means per *unique pair* for the static JSD
(the pair's choice marginal, each pair weighted by its number of trials — identical to the per-position average
under a shared order), and per *trial position* for the sequence JSD (a lag-1 joint is a property of adjacent
trials, pooled over subjects); with common random numbers both data sets share their schedules.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from agentmill.methods.autocog.simulate import Data

def jsd(p: np.ndarray, q: np.ndarray) -> float:
    """JSD(p, q) = ½ KL(p‖m) + ½ KL(q‖m), m = (p + q)/2, in nats, over the last axis; 0·ln 0 = 0.

    ``p``, ``q``: probability vectors of equal shape (non-negative, summing to 1 within 1e-6)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    if p.shape != q.shape or p.ndim != 1 or p.size < 2:
        raise ValueError(f"jsd: p and q must be 1-D of equal length >= 2, got shapes {p.shape} and {q.shape}")
    for name, x in (("p", p), ("q", q)):
        if (x < 0).any() or not math.isclose(float(x.sum()), 1.0, abs_tol=1e-6):
            raise ValueError(f"jsd: {name} must be a probability vector, got {x.tolist()}")
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        nz = x > 0
        return float((x[nz] * np.log(x[nz] / m[nz])).sum())

    return max(0.0, 0.5 * kl(p) + 0.5 * kl(q))


def _check_pair(a: Data, b: Data) -> None:
    if a.design.content_id() != b.design.content_id():
        raise ValueError("choice JSD: the two data sets come from different designs")


def static_jsd(a: Data, b: Data) -> float:
    """Mean over trials of JSD between the two pooled Bernoulli choice marginals (per unique pair)."""
    _check_pair(a, b)
    U = a.design.n_unique
    tot, acc = 0, 0.0
    for u in range(U):
        ma, mb = a.pair_idx == u, b.pair_idx == u
        if not ma.any() or not mb.any():
            continue
        pa, pb = float((a.resp[ma] == 0).mean()), float((b.resp[mb] == 0).mean())
        w = int(ma.sum(1).mean())  # trials of this pair per subject (K)
        acc += w * jsd(np.array([pa, 1 - pa]), np.array([pb, 1 - pb]))
        tot += w
    if tot == 0:
        raise ValueError("static_jsd: no pair was seen in both data sets")
    return acc / tot


def _lag1(resp: np.ndarray, t: int) -> np.ndarray:
    cell = 2 * resp[:, t - 1] + resp[:, t]  # (prev, cur) ∈ {AA, AB, BA, BB}
    return np.bincount(cell, minlength=4) / len(cell)


def sequence_jsd(a: Data, b: Data) -> float:
    """Mean over trial positions t ≥ 1 of JSD between the pooled (previous, current) response distributions."""
    _check_pair(a, b)
    T = min(a.resp.shape[1], b.resp.shape[1])
    if T < 2:
        raise ValueError(f"sequence_jsd: needs >= 2 trials, got {T}")
    return float(np.mean([jsd(_lag1(a.resp, t), _lag1(b.resp, t)) for t in range(1, T)]))


def choice_jsd(a: Data, b: Data, kind: Literal["static", "sequence"]) -> float:
    if kind == "static":
        return static_jsd(a, b)
    if kind == "sequence":
        return sequence_jsd(a, b)
    raise ValueError(f"choice_jsd: kind must be 'static' or 'sequence', got {kind!r}")
