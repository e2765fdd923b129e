"""The bias-free linear head W ∈ R^{m×d}: π(w|q) = softmax(W x_q); the route is the argmax over allowed workers.

Stage A (:func:`fit_soft_targets`) minimises (1/|Q|) Σ_q KL(p_q ‖ π(·|q)) + (ℓ2/2)‖W‖² with L-BFGS (convex in W),
where p_q = softmax_w((Y[q,w] − λ·Ĉ[q,w]) / τ) — a third-party reading of the report [S]; τ = 0.1 is this
project's default [R]. Stage B (:func:`evolve`) runs sep-CMA-ES (``cmaes.SepCMA``; Ros & Hansen 2008) on vec(W),
maximising F(W) = mean_q Y[q,a_q] − λ·mean_q Ĉ[q,a_q] + w_div·H(routing shares) on a 256-query minibatch per
generation, and keeps the best W on the validation objective (early stop after ``patience`` flat generations).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def soft_targets(Y: np.ndarray, C_hat: np.ndarray, lam: float, tau: float) -> np.ndarray:
    """p_q(w) = softmax_w((Y − λ Ĉ) / τ), shape (n, m)."""
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    return softmax((Y - lam * C_hat) / tau, axis=1)


def fit_soft_targets(X: np.ndarray, P: np.ndarray, l2: float = 1e-3, max_iter: int = 200) -> np.ndarray:
    """Stage A: W (m, d) minimising mean KL(P ‖ softmax(X Wᵀ)) + l2/2 ‖W‖² by L-BFGS-B (scipy)."""
    from scipy.optimize import minimize
    n, d = X.shape
    m = P.shape[1]
    X64 = X.astype(np.float64)  # dense or scipy sparse
    entropy = float(np.sum(np.where(P > 0, P * np.log(np.clip(P, 1e-300, None)), 0.0))) / n

    def f(w: np.ndarray) -> tuple[float, np.ndarray]:
        W = w.reshape(m, d)
        Z = np.asarray(X64 @ W.T)
        Z -= Z.max(axis=1, keepdims=True)
        logZ = np.log(np.exp(Z).sum(axis=1, keepdims=True))
        logpi = Z - logZ
        loss = entropy - float(np.sum(P * logpi)) / n + 0.5 * l2 * float(w @ w)
        G = np.asarray((X64.T @ (np.exp(logpi) - P)).T) / n + l2 * W
        return loss, G.ravel()

    res = minimize(f, np.zeros(m * d), jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    return res.x.reshape(m, d)


def route_argmax(X: np.ndarray, W: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """argmax_w (X Wᵀ) over allowed workers (a boolean mask of shape (m,)); ties go to the lower index."""
    Z = np.asarray(X @ W.T)
    if allowed is not None:
        Z = np.where(allowed[None, :], Z, -np.inf)
    return np.argmax(Z, axis=1)


def objective(choice: np.ndarray, Y: np.ndarray, C_hat: np.ndarray, lam: float, w_div: float) -> float:
    """F = mean Y[q, a_q] − λ mean Ĉ[q, a_q] + w_div · H(shares) (H normalised by ln m)."""
    rows = np.arange(len(choice))
    val = float(Y[rows, choice].mean() - lam * C_hat[rows, choice].mean())
    if w_div:
        m = Y.shape[1]
        share = np.bincount(choice, minlength=m) / len(choice)
        nz = share[share > 0]
        val += w_div * float(-(nz * np.log(nz)).sum() / np.log(m))
    return val


@dataclass
class ESReport:
    generations: int = 0
    evaluations: int = 0
    best_generation: int = -1
    val_history: list[float] = field(default_factory=list)
    train_history: list[float] = field(default_factory=list)
    gen_seconds: list[float] = field(default_factory=list)
    """Wall seconds of each generation (ask, evaluate, tell, validate)."""
    n_params: int = 0
    """Entries of W the ES searched (the columns active on training queries × workers)."""
    diag_spread: float = float("nan")
    """max/min of the final sep-CMA-ES diagonal (§5 C12: it barely moves at this scale)."""


def evolve(W0: np.ndarray, X: np.ndarray, Y: np.ndarray, C_hat: np.ndarray, Xv: np.ndarray, Yv: np.ndarray,
           Cv: np.ndarray, *, lam: float, w_div: float, generations: int, sigma0: float, popsize: int | None,
           batch: int, seed: int, patience: int = 20) -> tuple[np.ndarray, ESReport]:
    """Stage B: sep-CMA-ES on vec(W) from ``W0``; returns the best-on-validation W (``W0`` itself if nothing beat it)."""
    try:
        import cmaes
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the router's evolution stage needs cmaes: pip install 'agentmill[router]'") from e
    m, d = W0.shape
    rng = np.random.default_rng(seed)
    # Only the columns some training query activates can change the fitness; the rest stay at W0 (stage A leaves
    # them at 0) instead of drifting as noise that would reach validation and test queries only [R].
    active = np.flatnonzero(np.asarray(abs(X).sum(axis=0)).ravel() > 0) if d > 0 else np.arange(0)
    Xa, Xva = X[:, active], Xv[:, active]
    W_rest = W0.copy()
    W_rest[:, active] = 0.0
    bias_v = np.asarray(Xv @ W_rest.T)  # validation logits from the frozen columns

    def full(w: np.ndarray) -> np.ndarray:
        W = W0.copy()
        W[:, active] = w.reshape(m, len(active))
        return W

    es = cmaes.SepCMA(mean=W0[:, active].ravel().astype(np.float64), sigma=float(sigma0), seed=seed,
                      population_size=popsize)
    best_W = W0.copy()
    best_val = objective(route_argmax(Xv, W0), Yv, Cv, lam, w_div)
    rep = ESReport(val_history=[best_val])
    flat = 0
    import time
    for g in range(generations):
        t_gen = time.perf_counter()
        idx = rng.choice(X.shape[0], size=min(batch, X.shape[0]), replace=False)
        Xb, Yb, Cb = Xa[idx], Y[idx], C_hat[idx]
        sols = []
        for _ in range(es.population_size):
            w = es.ask()
            F = objective(np.argmax(np.asarray(Xb @ w.reshape(m, -1).T), axis=1), Yb, Cb, lam, w_div)
            sols.append((w, -F))  # cmaes minimises
        es.tell(sols)
        rep.evaluations += len(sols)
        rep.generations = g + 1
        Wa = es.mean.reshape(m, -1)
        v = objective(np.argmax(bias_v + np.asarray(Xva @ Wa.T), axis=1), Yv, Cv, lam, w_div)
        rep.val_history.append(v)
        rep.train_history.append(-min(s[1] for s in sols))
        rep.gen_seconds.append(time.perf_counter() - t_gen)
        if v > best_val + 1e-12:
            best_val, best_W, rep.best_generation, flat = v, full(es.mean), g + 1, 0
        else:
            flat += 1
            if flat >= patience:
                break
    rep.n_params = int(m * len(active))
    diag = getattr(es, "_C", None)  # the diagonal covariance
    if diag is not None:
        diag = np.asarray(diag)
        rep.diag_spread = float(diag.max() / max(diag.min(), 1e-300))
    return best_W, rep
