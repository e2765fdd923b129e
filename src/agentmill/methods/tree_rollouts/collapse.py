"""The advantage-collapse law of E162 and the statistics every GRPO user needs around it (numpy/scipy only).

A GRPO group of G rollouts with 0/1 rewards teaches nothing when all rewards agree: every group-normalised
advantage is then exactly 0. For a prompt with pass rate p (arXiv:2605.05262 [A]; the formulas are Bernoulli
algebra [D]):

    C(G, p) = p^G + (1 - p)^G          collapse probability
    M(G, p) = 1 - C(G, p)              informative ("mixed") probability, M < G·p for small p

Over a pool of prompts, E[C(G)] -> P(p = 0) + P(p = 1) as G grows: prompts that are never (or always) solved
form an "empty lake" that no budget drains. ``fit_pool_mixture`` estimates that lake from per-prompt success
counts and ``predict_collapse`` turns the fit into a calibrated prediction for fresh samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, gammaln

from agentmill.core.stats import Estimate, bootstrap_ci

ZERO_STD_TOL = 1e-6  # [R] test std <= tol, never == 0 (fp32 noise; NVIDIA-NeMo/RL PR #4158 review)


def _check_p(p: float | np.ndarray) -> np.ndarray:
    a = np.asarray(p, dtype=float)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    return a


def _check_G(G: int | np.ndarray, minimum: int = 1) -> np.ndarray:
    g = np.asarray(G)
    if not np.issubdtype(g.dtype, np.integer) or np.any(g < minimum):
        raise ValueError(f"G must be an integer >= {minimum}, got {G!r}")
    return g


def collapse_probability(p: float | np.ndarray, G: int | np.ndarray) -> float | np.ndarray:
    """C(G, p) = p^G + (1-p)^G: the probability that G i.i.d. 0/1 rewards are all equal (broadcasts)."""
    pa, g = _check_p(p), _check_G(G)
    out = pa**g + (1.0 - pa) ** g
    return float(out) if np.ndim(out) == 0 else out


def mixed_probability(p: float | np.ndarray, G: int | np.ndarray) -> float | np.ndarray:
    """M(G, p) = 1 - C(G, p): the probability that a group carries a learning signal."""
    c = collapse_probability(p, G)
    return 1.0 - c


def collapse_unbiased(k: int, N: int, G: int) -> float:
    """Unbiased collapse estimate for a random G-subset of N observed rollouts with k successes.

    Hypergeometric: [C(k, G) + C(N-k, G)] / C(N, G), with C(a, b) = 0 for b > a [D]. Requires G <= N.
    """
    if not (isinstance(N, (int, np.integer)) and N >= 1):
        raise ValueError(f"N must be an integer >= 1, got {N!r}")
    if not (isinstance(k, (int, np.integer)) and 0 <= k <= N):
        raise ValueError(f"k must be an integer in [0, N={N}], got {k!r}")
    if not (isinstance(G, (int, np.integer)) and 1 <= G <= N):
        raise ValueError(f"G must be an integer in [1, N={N}], got {G!r}")
    return (math.comb(int(k), int(G)) + math.comb(int(N - k), int(G))) / math.comb(int(N), int(G))


def min_group_size(p: float, delta: float) -> int | None:
    """G*(p, δ) = min{G : C(G, p) <= δ}; None for p in {0, 1} (no group size helps: the lake)."""
    _check_p(p)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if p in (0.0, 1.0):
        return None
    # C is decreasing in G; start from the ln(1/δ)/min(p,1-p) approximation's neighbourhood and step.
    q = min(p, 1 - p)
    G = max(1, int(math.log(1 / delta) / q) // 2)
    while G > 1 and collapse_probability(p, G - 1) <= delta:
        G -= 1
    while collapse_probability(p, G) > delta:
        G += 1
    return G


def expected_pool_collapse(z0: float, z1: float, a: float, b: float, G: int | np.ndarray) -> float | np.ndarray:
    """E[C(G)] over the pool z0·δ0 + z1·δ1 + (1-z0-z1)·Beta(a, b) [R]:

        z0 + z1 + (1 - z0 - z1)·[B(a+G, b) + B(a, b+G)] / B(a, b)

    computed with log-Beta functions so that G = 10^4 and beyond stay finite.
    """
    if not (0 <= z0 and 0 <= z1 and z0 + z1 <= 1):
        raise ValueError(f"need z0, z1 >= 0 and z0 + z1 <= 1, got z0={z0}, z1={z1}")
    if not (a > 0 and b > 0):
        raise ValueError(f"Beta parameters must be positive, got a={a}, b={b}")
    g = _check_G(G).astype(float)
    beta_part = np.exp(betaln(a + g, b) - betaln(a, b)) + np.exp(betaln(a, b + g) - betaln(a, b))
    out = z0 + z1 + (1 - z0 - z1) * beta_part
    return float(out) if np.ndim(out) == 0 else out


def simulate_groups(p: float | np.ndarray, G: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """0/1 rewards of ``n`` i.i.d. groups of G rollouts, float64 [n, G]; ``p`` is a scalar or one pass rate per
    group. Feed them to :func:`group_stats` (with ``np.repeat(np.arange(n), G)`` as group ids) to test a
    trainer's telemetry end to end; for collapse rates alone :func:`simulate_collapse` is O(1) per group.
    """
    _check_G(G)
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    pa = np.broadcast_to(_check_p(p), (n,))
    return (rng.random((n, int(G))) < pa[:, None]).astype(float)


def simulate_collapse(p: float | np.ndarray, G: int, n: int, rng: np.random.Generator) -> float:
    """Monte Carlo collapse rate of ``n`` groups of size G; ``p`` is a scalar or one pass rate per group.

    Drawing the success count k ~ Binomial(G, p) is exactly equivalent to drawing G Bernoullis and checking
    whether they agree, at O(1) cost per group (so G = 8192 over 20 000 prompts is cheap).
    """
    _check_G(G)
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    pa = np.broadcast_to(_check_p(p), (n,))
    k = rng.binomial(G, pa)
    return float(np.mean((k == 0) | (k == G)))


# ---------------------------------------------------------------------------------------- group statistics
@dataclass(frozen=True)
class GroupStats:
    """Per-group flags (arrays aligned with ``groups``) and batch rates, as a trainer would log them."""

    groups: np.ndarray
    size: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    all_success: np.ndarray
    all_fail: np.ndarray
    zero_std: np.ndarray

    @property
    def summary(self) -> dict[str, float]:
        n = max(len(self.groups), 1)
        return {"collapse/rate": float(self.zero_std.sum() / n),
                "collapse/all_success": float(self.all_success.sum() / n),
                "collapse/all_fail": float(self.all_fail.sum() / n),
                "collapse/mixed_ratio": float((~self.zero_std).sum() / n)}


def group_stats(rewards: Sequence[float | None] | np.ndarray, group_ids: Sequence[object] | np.ndarray, *,
                zero_std_tol: float = ZERO_STD_TOL, success_threshold: float = 0.5) -> GroupStats:
    """Collapse flags per group, groups in order of first appearance; vectorised (O(rows), not O(rows·groups)).

    ``None`` rewards are unscorable (a verifier error) and excluded, never counted as failures; a NaN or inf
    reward is a bug upstream and raises [R]. A group is collapsed when the population std of its scorable
    rewards is <= ``zero_std_tol`` ([R] a tolerance, never ``std == 0``, because fp32 noise leaves a
    constant group with a tiny nonzero std), or when it has fewer than 2 scorable rewards (no spread). A collapsed
    group is all-success / all-fail when its mean is above / at-or-below ``success_threshold``.
    """
    if not zero_std_tol >= 0:
        raise ValueError(f"zero_std_tol must be >= 0, got {zero_std_tol!r}")
    if np.ndim(rewards) != 1:
        raise ValueError(f"rewards must be 1-D (one entry per rollout), got shape {np.shape(rewards)}")
    scorable = np.array([x is not None for x in rewards], dtype=bool)
    r = np.array([np.nan if x is None else float(x) for x in rewards], dtype=float)
    if not np.all(np.isfinite(r[scorable])):
        raise ValueError("rewards contain NaN or inf; mark unscorable rollouts with None instead")
    ids = list(group_ids)
    if len(ids) != r.size:
        raise ValueError(f"rewards and group_ids must align, got {r.size} and {len(ids)} entries")
    index: dict[object, int] = {}
    inv = np.fromiter((index.setdefault(g, len(index)) for g in ids), dtype=np.intp, count=len(ids))
    m, gi, x = len(index), inv[scorable], r[scorable]
    size = np.bincount(gi, minlength=m)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(gi, weights=x, minlength=m) / size  # NaN for a group with nothing scorable
        var = np.bincount(gi, weights=(x - mean[gi]) ** 2, minlength=m) / size  # two-pass: no cancellation
    std = np.sqrt(np.where(size > 0, var, 0.0))
    zero = (std <= zero_std_tol) | (size < 2)
    with np.errstate(invalid="ignore"):
        succ = zero & (mean > success_threshold)
        fail = zero & (mean <= success_threshold)
    groups = np.empty(m, dtype=object)
    groups[:] = list(index)
    return GroupStats(groups, size, mean, std, succ, fail, zero)


# ------------------------------------------------------------------------------------ empirical-Bayes pool fit
@dataclass(frozen=True)
class PoolFit:
    """Maximum-likelihood mixture z0·δ0 + z1·δ1 + (1-z0-z1)·Beta(a, b) for per-prompt pass rates."""

    z0: float
    z1: float
    a: float
    b: float
    loglik: float
    converged: bool

    @property
    def lake_mass(self) -> float:
        return self.z0 + self.z1

    def expected_collapse(self, G: int | np.ndarray) -> float | np.ndarray:
        return expected_pool_collapse(self.z0, self.z1, self.a, self.b, G)


def _check_counts(counts: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(counts, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError("counts must be a sequence of (k, N) pairs")
    k, N = arr[:, 0], arr[:, 1]
    if np.any(k != np.round(k)) or np.any(N != np.round(N)) or np.any(N < 1) or np.any((k < 0) | (k > N)):
        raise ValueError("each count must be integers (k, N) with N >= 1 and 0 <= k <= N")
    return k, N


def _log_betabinom(k: np.ndarray, N: np.ndarray, a: float, b: float) -> np.ndarray:
    log_choose = gammaln(N + 1) - gammaln(k + 1) - gammaln(N - k + 1)
    return log_choose + betaln(k + a, N - k + b) - betaln(a, b)


_LOG_AB_BOUND = math.log(1e4)
"""Beta parameters are kept in [1e-4, 1e4]: beyond that the Beta part is a point mass the δ terms already model,
and the likelihood is flat (ours, not the paper's)."""


def _unpack(theta: np.ndarray) -> tuple[float, float, float, float]:
    """Unconstrained -> (z0, z1, a, b): softmax over (l0, l1, 0) for the weights, exp for Beta parameters."""
    l0, l1, la, lb = (float(x) for x in theta)
    m = max(l0, l1, 0.0)
    e0, e1, e2 = math.exp(l0 - m), math.exp(l1 - m), math.exp(-m)
    tot = e0 + e1 + e2
    return e0 / tot, e1 / tot, math.exp(min(la, 700.0)), math.exp(min(lb, 700.0))


def fit_pool_mixture(counts: Sequence[tuple[int, int]], *, restarts: int = 3, seed: int = 0) -> PoolFit:
    """Fit (z0, z1, a, b) by maximum likelihood to per-prompt (k successes, N samples) [R].

    Prompt i contributes  z0·[k=0] + z1·[k=N] + (1-z0-z1)·BetaBinom(k | N, a, b).  Nelder–Mead on unconstrained
    parameters (softmax weights, log a, log b), best of ``restarts`` starts (3 [R]). ``converged`` is False
    (never an exception) when the optimiser fails or the restarts disagree on the lake mass, i.e. the likelihood
    is flat in that direction.
    """
    from scipy.optimize import minimize

    k, N = _check_counts(counts)
    if k.size < 8:
        raise ValueError(f"fit_pool_mixture needs at least 8 prompts in counts, got {k.size}")
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    # The likelihood depends on the data only through the distinct (k, N) pairs and their multiplicities, and
    # the binomial coefficients are constants: both are computed once, not per likelihood evaluation.
    kn, mult = np.unique(np.stack([k, N], 1), axis=0, return_counts=True)
    ku, Nu = kn[:, 0], kn[:, 1]
    log_choose = gammaln(Nu + 1) - gammaln(ku + 1) - gammaln(Nu - ku + 1)
    at0, atN = (ku == 0).astype(float), (ku == Nu).astype(float)

    def neg_loglik(theta: np.ndarray) -> float:
        if abs(theta[2]) > _LOG_AB_BOUND or abs(theta[3]) > _LOG_AB_BOUND:
            return 1e300
        z0, z1, a, b = _unpack(theta)
        log_bb = log_choose + betaln(ku + a, Nu - ku + b) - betaln(a, b)
        with np.errstate(divide="ignore"):
            ll = np.logaddexp(math.log(max(1.0 - z0 - z1, 1e-300)) + log_bb, np.log(z0 * at0 + z1 * atN))
        return -float(mult @ ll)

    rng = np.random.default_rng(seed)
    centre = np.array([-1.0, -2.0, 0.0, 0.0])  # z0 ≈ 0.24, z1 ≈ 0.09, Beta(1, 1): a neutral start (ours)
    starts = [centre] + [rng.normal(centre, 1.0) for _ in range(restarts - 1)]
    results = [minimize(neg_loglik, x0, method="Nelder-Mead",
                        options={"xatol": 1e-5, "fatol": 1e-8, "maxiter": 4000, "maxfev": 8000})
               for x0 in starts]
    best = min(results, key=lambda r: r.fun)
    z0, z1, a, b = _unpack(best.x)
    lake = sorted(sum(_unpack(r.x)[:2]) for r in results if abs(r.fun - best.fun) < 1e-3)
    agree = len(lake) >= 2 and lake[-1] - lake[0] < 0.02
    return PoolFit(z0, z1, a, b, loglik=float(-best.fun), converged=bool(best.success and agree))


def predict_collapse(fit: PoolFit, counts: Sequence[tuple[int, int]], G: int) -> np.ndarray:
    """Per-prompt posterior-predictive collapse of G fresh samples given observed (k, N) and the fitted prior.

    The posterior is w0·δ0 + w1·δ1 + wb·Beta(a+k, b+N-k); its mean of C(G, p) is
    w0 + w1 + wb·[B(a+k+G, b+N-k) + B(a+k, b+N-k+G)] / B(a+k, b+N-k).
    """
    k, N = _check_counts(counts)
    _check_G(G)
    with np.errstate(divide="ignore"):
        lw = np.stack([np.log(fit.z0) + np.where(k == 0, 0.0, -np.inf),
                       np.log(fit.z1) + np.where(k == N, 0.0, -np.inf),
                       np.log(max(1 - fit.z0 - fit.z1, 1e-300)) + _log_betabinom(k, N, fit.a, fit.b)])
    w = np.exp(lw - lw.max(0))
    w /= w.sum(0)
    a2, b2 = fit.a + k, fit.b + N - k
    beta_c = np.exp(betaln(a2 + G, b2) - betaln(a2, b2)) + np.exp(betaln(a2, b2 + G) - betaln(a2, b2))
    return w[0] + w[1] + w[2] * beta_c


def pool_collapse_curve(counts: Sequence[tuple[int, int]], Gs: Sequence[int], *, n_boot: int = 2000,
                        seed: int = 0) -> dict[int, Estimate]:
    """Observed pool collapse Ĉ_G (mean of the unbiased per-prompt estimates) with a bootstrap CI over prompts."""
    k, N = _check_counts(counts)
    out = {}
    for G in Gs:
        per = np.array([collapse_unbiased(int(ki), int(ni), int(G)) for ki, ni in zip(k, N)])
        out[int(G)] = bootstrap_ci(per, n_boot=n_boot, seed=seed)
    return out
