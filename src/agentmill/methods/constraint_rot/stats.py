"""Statistics of spec §2.11: Wilson intervals, the two-stage cluster bootstrap, exact McNemar, Holm, and the
variance decomposition of the crossing experiment (§2.9).

Why a two-stage bootstrap here when :func:`agentmill.core.stats.cluster_bootstrap` exists: the core version
resamples one level of clusters. ConstraintRot's episodes are nested in rule families (a family's episodes share
a predicate and phrasing pool, so they are dependent) and the spec asks for families first, then episodes within
each drawn family. All rows of one episode (its conditions) travel together, which is what makes a difference of
two conditions *paired*: one resample evaluates both. Wilson intervals delegate to the core.

Rows are the plain result-row dicts of §6.3; statistics are callables ``stat(rows) -> float``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate

CI = Estimate
"""A bootstrap result is a core :class:`~agentmill.core.stats.Estimate` (value, lo, hi, n = number of clusters)."""

Rows = Sequence[Mapping[str, Any]]
Stat = Callable[[Rows], float]


# -- single proportions ------------------------------------------------------------------------------------------
def _level_of(z: float) -> float:
    from scipy.stats import norm

    if not z > 0:
        raise ValueError(f"z must be positive, got {z}")
    return float(2 * norm.cdf(z) - 1)


def wilson_estimate(k: int, n: int, z: float = 1.96) -> Estimate:
    """``k/n`` with its Wilson score interval at ``z`` (the core's :func:`proportion_estimate`)."""
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise ValueError(f"wilson needs integer counts, got k={k!r}, n={n!r}")
    return proportion_estimate(int(k), int(n), level=_level_of(z))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson 95% interval ``(lo, hi)`` of ``k/n`` (§2.11: centre (p̂ + z²/2n)/(1 + z²/n), half-width
    z·sqrt(p̂(1−p̂)/n + z²/4n²)/(1 + z²/n)). Well behaved at 0 and n, where the normal interval collapses."""
    e = wilson_estimate(k, n, z)
    return e.lo, e.hi


# -- two-stage cluster bootstrap ---------------------------------------------------------------------------------
def _nested_index(rows: Rows, cluster: str, unit: str) -> list[list[list[int]]]:
    """``clusters[c][e]`` = indices of the rows of episode ``e`` in cluster ``c`` (first-seen order)."""
    clusters: dict[Any, dict[Any, list[int]]] = {}
    for i, r in enumerate(rows):
        for f in (cluster, unit):
            if f not in r:
                raise ValueError(f"cluster_bootstrap: row {i} has no {f!r} field")
        clusters.setdefault(r[cluster], {}).setdefault(r[unit], []).append(i)
    return [list(eps.values()) for eps in clusters.values()]


def _safe(stat: Stat, rows: Rows) -> float:
    """``stat(rows)``, NaN when it is undefined on this sample (raises ValueError/ZeroDivisionError or is NaN)."""
    try:
        return float(stat(rows))
    except (ValueError, ZeroDivisionError):
        return math.nan


def bootstrap_samples(rows: Rows, stats: Sequence[Stat], *, cluster: str = "family", unit: str = "episode_id",
                      B: int = 2000, seed: int = 0) -> np.ndarray:
    """``[B, len(stats)]`` bootstrap replicates: draw as many clusters as there are, with replacement; inside each
    drawn cluster draw as many episodes (``unit``) as it has, with replacement; every stat sees the same resample.
    An entry is NaN where the stat is undefined on that resample (e.g. no row with the conditioning label)."""
    if B < 1:
        raise ValueError(f"B must be >= 1, got {B}")
    if not rows:
        raise ValueError("cluster_bootstrap: no rows")
    nested = _nested_index(rows, cluster, unit)
    rng = np.random.default_rng(seed)
    out = np.empty((B, len(stats)))
    for b in range(B):
        idx: list[int] = []
        for c in rng.integers(0, len(nested), size=len(nested)):
            eps = nested[c]
            for e in rng.integers(0, len(eps), size=len(eps)):
                idx.extend(eps[e])
        sample = [rows[i] for i in idx]
        out[b] = [_safe(s, sample) for s in stats]
    return out


def percentile_estimate(value: float, boots: np.ndarray, *, n: int, level: float = 0.95,
                        method: str = "cluster_bootstrap") -> Estimate:
    """Percentile interval of the finite ``boots``; the interval is widened to contain ``value`` (as the core
    does) because :class:`Estimate` requires lo ≤ value ≤ hi. NaN bounds when nothing is defined."""
    b = np.asarray(boots, dtype=float)
    ok = b[np.isfinite(b)]
    dropped = int(b.size - ok.size)
    tag = f"{method}(dropped={dropped})" if dropped else method
    if ok.size == 0 or math.isnan(value):
        return Estimate(value, math.nan, math.nan, n=n, level=level, method=tag)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(ok, [alpha, 1 - alpha])
    return Estimate(float(value), float(min(lo, value)), float(max(hi, value)), n=n, level=level, method=tag)


def cluster_bootstrap(rows: Rows, stat: Stat, *, cluster: str = "family", B: int = 2000, seed: int = 0,
                      paired_with: Stat | None = None, unit: str = "episode_id", level: float = 0.95) -> CI:
    """Two-stage (families, then episodes) percentile bootstrap of ``stat(rows)``, or of
    ``stat(rows) − paired_with(rows)`` when ``paired_with`` is given — both evaluated on the same resample, so the
    difference of two conditions is paired. ``n`` of the result is the number of clusters. Resamples on which the
    statistic is undefined are dropped and counted in ``method``."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    stats: list[Stat] = [stat] if paired_with is None else [stat, paired_with]
    boots = bootstrap_samples(rows, stats, cluster=cluster, unit=unit, B=B, seed=seed)  # validates rows first
    value = _safe(stat, rows) - (_safe(paired_with, rows) if paired_with is not None else 0.0)
    d = boots[:, 0] if paired_with is None else boots[:, 0] - boots[:, 1]
    n = len({r[cluster] for r in rows})
    return percentile_estimate(value, d, n=n, level=level,
                               method="paired_cluster_bootstrap" if paired_with is not None else "cluster_bootstrap")


# -- paired binary decisions -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar test. ``b`` = pairs with a=1, b=0; ``c`` = pairs with a=0, b=1; ``n_pairs`` all pairs."""

    b: int
    c: int
    n_pairs: int
    p_value: float


def mcnemar_exact(a: Sequence[bool | int], b: Sequence[bool | int]) -> McNemarResult:
    """Exact (binomial) McNemar test on paired binary decisions, e.g. violation unpinned (``a``) vs pinned (``b``)
    on the same episodes: under H0 the discordant pairs split Binomial(b + c, 1/2); two-sided
    p = min(1, 2·P[X ≤ min(b, c)]). No discordant pair → p = 1."""
    from scipy.stats import binom

    if len(a) != len(b):
        raise ValueError(f"mcnemar_exact: paired sequences need equal length, got {len(a)} and {len(b)}")
    for name, seq in (("a", a), ("b", b)):
        bad = [x for x in seq if x not in (0, 1, True, False)]
        if bad:
            raise ValueError(f"mcnemar_exact: {name} must be binary, got {bad[0]!r}")
    n10 = sum(1 for x, y in zip(a, b) if x and not y)
    n01 = sum(1 for x, y in zip(a, b) if y and not x)
    n = n10 + n01
    p = 1.0 if n == 0 else min(1.0, 2.0 * float(binom.cdf(min(n10, n01), n, 0.5)))
    return McNemarResult(n10, n01, len(a), p)


# -- multiple testing ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HolmResult:
    name: str
    p_value: float
    p_adjusted: float
    reject: bool


def holm(pvalues: Sequence[float] | Mapping[str, float], alpha: float = 0.05) -> list[HolmResult]:
    """Holm's step-down correction over one pre-registered family. Adjusted p of the i-th smallest (1-based) is
    max over j ≤ i of min(1, (m − j + 1)·p_(j)); reject where adjusted p ≤ alpha. Output in input order; names
    are the mapping keys or the positions."""
    items = list(pvalues.items()) if isinstance(pvalues, Mapping) else [(str(i), p) for i, p in enumerate(pvalues)]
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    for name, p in items:
        if not 0 <= p <= 1 or math.isnan(p):
            raise ValueError(f"holm: p-value of {name!r} must be in [0, 1], got {p}")
    m = len(items)
    order = sorted(range(m), key=lambda i: items[i][1])
    adj = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * items[i][1]))
        adj[i] = running
    return [HolmResult(name, float(p), adj[i], adj[i] <= alpha) for i, (name, p) in enumerate(items)]


# -- crossing experiment ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VarianceDecomposition:
    """Two-way decomposition of the cell means ``V[s][a]`` (§2.9): η²_S = SS_rows/SS_total (summarisers),
    η²_A = SS_cols/SS_total (actors); the rest is interaction. NaN η² when all cells are equal."""

    eta2_S: float
    eta2_A: float
    ss_rows: float
    ss_cols: float
    ss_total: float

    @property
    def eta2_interaction(self) -> float:
        return 1.0 - self.eta2_S - self.eta2_A if self.ss_total > 0 else math.nan


def variance_decomposition(matrix: Sequence[Sequence[float]] | Mapping[Any, Mapping[Any, float]] | np.ndarray
                           ) -> VarianceDecomposition:
    """η²_S and η²_A over a complete summariser × actor matrix of cell means (rows = summarisers)."""
    if isinstance(matrix, Mapping):
        cols = sorted({a for row in matrix.values() for a in row}, key=str)
        missing = [(s, a) for s, row in matrix.items() for a in cols if a not in row]
        if missing:
            raise ValueError(f"variance_decomposition: cell {missing[0]} is missing (matrix must be complete)")
        x = np.array([[matrix[s][a] for a in cols] for s in matrix], dtype=float)
    else:
        x = np.asarray(matrix, dtype=float)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"variance_decomposition needs at least a 2 x 2 matrix, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("variance_decomposition: matrix contains NaN or inf")
    g = x.mean()
    ss_rows = float(x.shape[1] * ((x.mean(axis=1) - g) ** 2).sum())
    ss_cols = float(x.shape[0] * ((x.mean(axis=0) - g) ** 2).sum())
    ss_total = float(((x - g) ** 2).sum())
    if ss_total <= 1e-15:
        return VarianceDecomposition(math.nan, math.nan, ss_rows, ss_cols, 0.0)
    return VarianceDecomposition(ss_rows / ss_total, ss_cols / ss_total, ss_rows, ss_cols, ss_total)


__all__ = ["CI", "HolmResult", "McNemarResult", "VarianceDecomposition", "bootstrap_samples", "cluster_bootstrap",
           "holm", "mcnemar_exact", "percentile_estimate", "variance_decomposition", "wilson", "wilson_estimate"]
