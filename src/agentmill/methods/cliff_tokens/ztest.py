"""The cliff test: a one-sided, unpooled two-proportion z-test with a margin, and its exact properties.

Token t is a cliff iff k_{t-1} > 0 and

    Δ̂_t = V̂_{t-1} − V̂_t  >  δ0 + z · SE_t,   SE_t = sqrt(V̂_{t-1}(1−V̂_{t-1})/n_{t-1} + V̂_t(1−V̂_t)/n_t)

(strict inequality; H0: Δ ≤ δ0). Defaults δ0 = 0.1, z = 1.645, n = 64 are the paper's
(``src/analysis/cliff_threshold.py`` of the Cliff-token code) [P]. Counts are stored as integers, never re-derived
from rounded floats. The exact false-positive rate, size and power below are sums over the two binomial laws [D].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Sequence

import numpy as np

Correction = Literal["none", "holm", "bh"]


@dataclass(frozen=True)
class CliffTest:
    """The test's constants."""

    delta0: float = 0.1
    """Margin δ0 of H0: Δ ≤ δ0 (the paper's 0.1 [P])."""
    z: float = 1.645
    """One-sided critical value (α = 0.05 [P])."""
    correction: Correction = "none"
    """Multiple-testing correction over one trace's scored positions: none (the paper), holm, bh."""
    alpha: float = 0.05
    """Family level used with ``correction`` (p-values below it after adjustment are cliffs)."""

    def __post_init__(self) -> None:
        if not 0 <= self.delta0 < 1:
            raise ValueError(f"CliffTest: delta0 must be in [0, 1), got {self.delta0}")
        if not self.z > 0:
            raise ValueError(f"CliffTest: z must be > 0, got {self.z}")
        if self.correction not in ("none", "holm", "bh"):
            raise ValueError(f"CliffTest: correction must be none, holm or bh, got {self.correction!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"CliffTest: alpha must be in (0, 1), got {self.alpha}")


def _check(k: np.ndarray, n: np.ndarray, name: str) -> None:
    if np.any(n < 2):
        raise ValueError(f"{name}: n must be >= 2, got {n.min()}")
    if np.any(k < 0) or np.any(k > n):
        raise ValueError(f"{name}: counts must satisfy 0 <= k <= n")


def is_cliff(k_prev, n_prev, k_curr, n_curr, test: CliffTest = CliffTest()) -> np.ndarray | bool:
    """Vectorised cliff rule on integer counts (broadcasts)."""
    kp, np_, kc, nc = (np.asarray(x, dtype=np.int64) for x in (k_prev, n_prev, k_curr, n_curr))
    _check(kp, np_, "is_cliff (prev)")
    _check(kc, nc, "is_cliff (curr)")
    vp, vc = kp / np_, kc / nc
    se = np.sqrt(vp * (1 - vp) / np_ + vc * (1 - vc) / nc)
    out = (kp > 0) & ((vp - vc) > test.delta0 + test.z * se)
    return bool(out) if out.ndim == 0 else out


def z_and_p(k_prev: int, n_prev: int, k_curr: int, n_curr: int, test: CliffTest = CliffTest()) -> tuple[float, float]:
    """(z statistic, one-sided p) of H0: Δ ≤ δ0; SE = 0 gives p = 0 if Δ̂ > δ0 else 1."""
    vp, vc = k_prev / n_prev, k_curr / n_curr
    se = math.sqrt(vp * (1 - vp) / n_prev + vc * (1 - vc) / n_curr)
    d = vp - vc - test.delta0
    if se == 0:
        return (math.inf if d > 0 else -math.inf), (0.0 if d > 0 else 1.0)
    zs = d / se
    return zs, 0.5 * math.erfc(zs / math.sqrt(2))


def cliff_matrix(n: int, test: CliffTest = CliffTest()) -> np.ndarray:
    """(n+1, n+1) bool: entry [k_prev, k_curr] is a cliff at equal n."""
    k = np.arange(n + 1)
    return np.asarray(is_cliff(k[:, None], n, k[None, :], n, test))


@lru_cache(maxsize=4096)
def _pmf(v: float, n: int) -> np.ndarray:
    from scipy.stats import binom

    return binom.pmf(np.arange(n + 1), n, v)


@lru_cache(maxsize=64)
def _matrix(n_prev: int, n_curr: int, test: CliffTest) -> np.ndarray:
    kp, kc = np.arange(n_prev + 1), np.arange(n_curr + 1)
    return np.asarray(is_cliff(kp[:, None], n_prev, kc[None, :], n_curr, test))


def power(v_prev: float, v_curr: float, n: int, test: CliffTest = CliffTest(), n_curr: int | None = None) -> float:
    """Exact probability that the test flags a cliff when the true potentials are ``v_prev`` → ``v_curr``."""
    nc = n if n_curr is None else n_curr
    return float(_pmf(float(v_prev), int(n)) @ _matrix(int(n), int(nc), test) @ _pmf(float(v_curr), int(nc)))


def null_fp_rate(v: float, n: int, test: CliffTest = CliffTest()) -> float:
    """Exact per-position false-positive rate when the potential is constant at ``v``."""
    return power(v, v, n, test)


def min_detectable(n: int, test: CliffTest = CliffTest()) -> list[tuple[int, float, float]]:
    """Per k_prev with any cliff: (k_prev, smallest flagged drop, largest V̂_t that still counts)."""
    m = cliff_matrix(n, test)
    out = []
    for kp in range(n + 1):
        ks = np.flatnonzero(m[kp])
        if ks.size:
            out.append((kp, (kp - ks.max()) / n, ks.max() / n))
    return out


@dataclass(frozen=True)
class Cliff:
    """One detected cliff at trace position ``pos`` (1-based: the token y_pos)."""

    pos: int
    token_id: int
    k_prev: int
    n_prev: int
    k_curr: int
    n_curr: int
    drop: float
    z: float
    p: float


def _adjust(ps: Sequence[float], correction: Correction) -> list[float]:
    from agentmill.core.stats import benjamini_hochberg, holm

    if not ps or correction == "none":
        return list(ps)
    return holm(ps) if correction == "holm" else benjamini_hochberg(ps)


def detect(k: np.ndarray, n: np.ndarray, trace_ids: Sequence[int], test: CliffTest = CliffTest()) -> list[Cliff]:
    """Cliffs of one scanned trace. ``k``/``n`` have T+1 entries (index t = potential after t tokens; k = −1 means
    unscored); consecutive *scored* positions are compared and a drop is attributed to the later one."""
    k, n = np.asarray(k), np.asarray(n)
    scored = [t for t in range(len(k)) if k[t] >= 0 and n[t] >= 2]
    cand = []
    for a, b in zip(scored, scored[1:]):
        zs, p = z_and_p(int(k[a]), int(n[a]), int(k[b]), int(n[b]), test)
        flag = bool(is_cliff(k[a], n[a], k[b], n[b], test))
        cand.append((b, a, zs, p, flag))
    if test.correction != "none":
        adj = _adjust([c[3] for c in cand], test.correction)
        cand = [(b, a, zs, p, bool(k[a] > 0 and pa < test.alpha and k[a] / n[a] - k[b] / n[b] > test.delta0))
                for (b, a, zs, p, _), pa in zip(cand, adj)]
    return [Cliff(b, int(trace_ids[b - 1]), int(k[a]), int(n[a]), int(k[b]), int(n[b]),
                  float(k[a] / n[a] - k[b] / n[b]), float(zs), float(p)) for b, a, zs, p, flag in cand if flag]


def expected_false_cliffs(k: np.ndarray, n: np.ndarray, test: CliffTest = CliffTest()) -> float:
    """Σ over compared pairs of the null FP rate at the plug-in V̂_{t-1}: the spurious-cliff count to set beside
    the observed count (no correction across positions in the paper)."""
    k, n = np.asarray(k), np.asarray(n)
    scored = [t for t in range(len(k)) if k[t] >= 0 and n[t] >= 2]
    return float(sum(null_fp_rate(k[a] / n[a], int(n[a]), test) for a in scored[:-1]))
