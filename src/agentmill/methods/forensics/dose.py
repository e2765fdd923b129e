"""Dose-response: a logistic fit with a bootstrap d50, the Cochran–Armitage trend, and the largest dose with none.

``P(y | d) = σ(β0 + β1·d)`` (optionally on log dose) by maximum likelihood (Newton–Raphson with a small ridge so a
separable grid still converges), ``d50 = −β0/β1``, a percentile bootstrap over episodes (resampled within each dose,
B = 2,000 by default); the Cochran–Armitage test on the dose grid; ``zero_below`` = the largest grid dose such that
the pooled outcomes at all doses up to it have a Wilson upper bound ≤ ε (0.10, docs/methods/forensics.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from agentmill.core.stats import Estimate, cochran_armitage, proportion_estimate


@dataclass(frozen=True)
class DoseFit:
    """``beta0``, ``beta1`` (Estimates, bootstrap CIs), ``d50`` (Estimate; NaN bounds when the slope's sign flips in
    too many resamples), the trend test ``trend_z``/``trend_p``, ``zero_below`` (None if even the lowest dose fails),
    and the per-dose table ``rates`` of (dose, successes, n)."""

    beta0: Estimate
    beta1: Estimate
    d50: Estimate
    trend_z: float
    trend_p: float
    zero_below: float | None
    rates: list[tuple[float, int, int]] = field(default_factory=list)
    log_dose: bool = False


def logistic_mle(x: np.ndarray, s: np.ndarray, n: np.ndarray, *, ridge: float = 1e-6,
                 iters: int = 60) -> tuple[float, float]:
    """(β0, β1) of the binomial logistic regression of ``s`` successes out of ``n`` at each ``x`` (grouped data,
    which is the same likelihood as one row per episode); x is standardised inside and mapped back."""
    w = n.astype(float)
    mu = float(np.sum(w * x) / w.sum())
    sd = float(np.sqrt(np.sum(w * (x - mu) ** 2) / w.sum())) or 1.0
    z = (x - mu) / sd
    X = np.column_stack([np.ones_like(z), z])
    b = np.zeros(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(X @ b, -30, 30)))
        g = X.T @ (s - w * p) - ridge * b
        H = (X * (w * p * (1 - p))[:, None]).T @ X + ridge * np.eye(2)
        step = np.linalg.solve(H, g)
        b = b + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(b[0] - b[1] * mu / sd), float(b[1] / sd)


def logistic_mle_batch(x: np.ndarray, S: np.ndarray, n: np.ndarray, *, ridge: float = 1e-6,
                       iters: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """:func:`logistic_mle` for many success vectors at once (rows of ``S``, shape [B, G]); returns (β0[B], β1[B])."""
    w = n.astype(float)
    mu = float(np.sum(w * x) / w.sum())
    sd = float(np.sqrt(np.sum(w * (x - mu) ** 2) / w.sum())) or 1.0
    z = (x - mu) / sd
    X = np.column_stack([np.ones_like(z), z])  # [G, 2]
    b = np.zeros((S.shape[0], 2))
    eye = ridge * np.eye(2)
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(b @ X.T, -30, 30)))  # [B, G]
        g = (S - w * p) @ X - ridge * b  # [B, 2]
        wt = w * p * (1 - p)  # [B, G]
        H = np.einsum("bg,gi,gj->bij", wt, X, X) + eye
        step = np.linalg.solve(H, g[..., None])[..., 0]
        b = b + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return b[:, 0] - b[:, 1] * mu / sd, b[:, 1] / sd


def zero_below(rates: list[tuple[float, int, int]], eps: float = 0.10) -> float | None:
    """The largest dose d such that the outcomes pooled over all doses ≤ d have a Wilson upper bound ≤ ``eps``."""
    best, k, n = None, 0, 0
    for d, s, m in sorted(rates):
        k, n = k + s, n + m
        if proportion_estimate(k, n).hi <= eps:
            best = d
        else:
            break
    return best


def dose_response(doses: np.ndarray, outcomes: np.ndarray, *, log_dose: bool = False, B: int = 2000, seed: int = 0,
                  eps: float = 0.10, level: float = 0.95) -> DoseFit:
    """Fit the dose-response of binary ``outcomes`` (one per episode) at ``doses`` (same length)."""
    d = np.asarray(doses, dtype=float)
    y = np.asarray(outcomes, dtype=float)
    if d.shape != y.shape or d.ndim != 1 or len(d) < 4:
        raise ValueError("dose_response needs 1-D doses and outcomes of one length (>= 4 episodes)")
    grid = np.unique(d)
    rates = [(float(g), int(y[d == g].sum()), int((d == g).sum())) for g in grid]
    gx = np.log(grid) if log_dose else grid
    succ = np.array([r[1] for r in rates], dtype=float)
    tot = np.array([r[2] for r in rates], dtype=float)
    b0, b1 = logistic_mle(gx, succ, tot)
    rng = np.random.default_rng(seed)
    # resampling episodes within each dose = drawing each dose's successes from Binomial(n_d, p̂_d)
    boot_s = rng.binomial(tot.astype(int)[None, :], (succ / tot)[None, :], size=(B, len(grid))).astype(float)
    bs0, bs1 = logistic_mle_batch(gx, boot_s, tot)
    with np.errstate(divide="ignore", invalid="ignore"):
        d50s = np.where(bs1 > 1e-12, -bs0 / bs1, np.nan)
    a = (1 - level) / 2

    def est(v: float, bs: np.ndarray, method: str) -> Estimate:
        ok = bs[np.isfinite(bs)]
        dropped = B - len(ok)
        if len(ok) < 2:
            return Estimate(v, math.nan, math.nan, n=len(d), method=method, dropped=dropped, n_boot=B)
        lo, hi = np.quantile(ok, [a, 1 - a])
        return Estimate(v, min(float(lo), v), max(float(hi), v), n=len(d), level=level, method=method,
                        dropped=dropped, n_boot=B)

    d50 = -b0 / b1 if b1 > 1e-12 else math.nan
    d50_b = np.exp(d50s) if log_dose else d50s
    d50_v = math.exp(d50) if (log_dose and math.isfinite(d50)) else d50
    if math.isfinite(d50_v):
        d50_est = est(d50_v, d50_b, "bootstrap_percentile")
    else:
        d50_est = Estimate(math.nan, math.nan, math.nan, n=len(d), method="bootstrap_percentile")
    z, p = cochran_armitage([r[0] for r in rates], [r[1] for r in rates], [r[2] for r in rates])
    return DoseFit(est(b0, bs0, "bootstrap_percentile"), est(b1, bs1, "bootstrap_percentile"), d50_est, z, p,
                   zero_below(rates, eps), rates, log_dose)


__all__ = ["DoseFit", "dose_response", "logistic_mle", "zero_below"]
