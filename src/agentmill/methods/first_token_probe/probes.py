"""Grouped linear probes over (position × layer) with their controls, in numpy/scipy.

Per cell (docs/methods/first_token_probe.md, "Probes") [R; logistic-regression probes as in Chan et al., arXiv
2507.12428]: standardise on train; L2 logistic regression with balanced class weights; C chosen from
``ProbeConfig.C_grid`` by grouped inner cross-validation AUROC on train; the headline layer ``l*(p)`` is the argmax
of inner-CV AUROC on train, never chosen on test. Test AUROC (Mann–Whitney, ties ½) with a bootstrap over
templates; balanced accuracy at the Youden threshold chosen on train out-of-fold scores. Null band: refits on
train labels permuted among prompts with the same number of samples (within-prompt correlation kept), scored on the
true test labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from agentmill.core.stats import Estimate, auroc, cluster_bootstrap
from agentmill.methods.first_token_probe.config import ProbeConfig


class DegenerateLabels(ValueError):
    """Too few samples of a class to fit or score a probe; the message gives the counts."""


def fit_logreg(X: np.ndarray, y: np.ndarray, *, C: float = 1.0, balanced: bool = True,
               max_iter: int = 2000) -> tuple[np.ndarray, float]:
    """L2 logistic regression, ``C·Σ_i w_i·logloss_i + ½‖w‖²`` (the bias unpenalised); returns (weights [d],
    bias). ``balanced`` weighs class c by n / (2·n_c). Newton's method (the objective is strictly convex) for
    d ≤ 256, L-BFGS above."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, d = X.shape
    sw = np.ones(n)
    if balanced:
        n1 = y.sum()
        if 0 < n1 < n:
            sw = np.where(y == 1, n / (2 * n1), n / (2 * (n - n1)))
    Xb = np.hstack([X, np.ones((n, 1))])
    reg = np.ones(d + 1)
    reg[d] = 0.0

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = Xb @ theta
        loss = np.logaddexp(0.0, z) - y * z  # log(1 + e^z) − y·z, stable
        g = sw * (0.5 * (1 + np.tanh(0.5 * z)) - y)
        return C * float(sw @ loss) + 0.5 * float((reg * theta) @ theta), C * (Xb.T @ g) + reg * theta

    theta = np.zeros(d + 1)
    if d <= 256:
        val = f(theta)[0]
        for _ in range(50):
            z = Xb @ theta
            p = 0.5 * (1 + np.tanh(0.5 * z))
            grad = C * (Xb.T @ (sw * (p - y))) + reg * theta
            Hm = C * (Xb.T * (sw * p * (1 - p))) @ Xb + np.diag(reg) + 1e-10 * np.eye(d + 1)
            step = np.linalg.solve(Hm, grad)
            t = 1.0
            while True:  # backtracking keeps Newton monotone when the curvature is tiny (separable data)
                new = theta - t * step
                nv = f(new)[0]
                if nv <= val - 1e-4 * t * float(grad @ step) or t < 1e-8:
                    break
                t *= 0.5
            theta, done = new, abs(val - nv) <= 1e-10 * max(1.0, abs(val))
            val = nv
            if done or float(np.abs(grad).max()) < 1e-8:
                break
        return theta[:d], float(theta[d])
    from scipy.optimize import minimize

    res = minimize(f, theta, jac=True, method="L-BFGS-B", options={"maxiter": max_iter})
    return res.x[:d], float(res.x[d])


def standardise(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    mu, sd = train.mean(0), train.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    return [(a - mu) / sd for a in (train, *others)]


def group_folds(groups: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold id per row: whole groups (templates) assigned round-robin in a seeded order, so no group straddles
    folds. (No stratification: the inner AUROC of a fold without both classes is skipped.)"""
    uniq = np.unique(groups)
    order = np.random.default_rng(seed).permutation(uniq.size)
    fold_of = {uniq[j]: i % k for i, j in enumerate(order)}
    return np.array([fold_of[g] for g in groups])


def oof_scores(X: np.ndarray, y: np.ndarray, folds: np.ndarray, C: float) -> np.ndarray:
    """Out-of-fold decision scores."""
    s = np.full(len(y), np.nan)
    for f in np.unique(folds):
        tr, te = folds != f, folds == f
        if len(np.unique(y[tr])) < 2:
            continue
        a, b = standardise(X[tr], X[te])
        w, c = fit_logreg(a, y[tr], C=C)
        s[te] = b @ w + c
    return s


def _auc_ok(s: np.ndarray, y: np.ndarray) -> float:
    ok = ~np.isnan(s)
    return auroc(s[ok], y[ok]) if ok.sum() and len(np.unique(y[ok])) == 2 else float("nan")


def youden_threshold(scores: np.ndarray, y: np.ndarray) -> float:
    ok = ~np.isnan(scores)
    s, t = scores[ok], y[ok]
    best, thr = -1.0, 0.0
    for c in np.unique(s):
        pred = s >= c
        j = pred[t == 1].mean() + (~pred[t == 0]).mean() - 1 if (t == 1).any() and (t == 0).any() else -1
        if j > best:
            best, thr = j, float(c)
    return thr


def balanced_accuracy(pred: np.ndarray, y: np.ndarray) -> float:
    return float(0.5 * (pred[y == 1].mean() + (~pred[y == 0].astype(bool)).mean()))


@dataclass
class CellFit:
    """One (position, layer) probe: chosen C, inner-CV AUROC, test scores, Youden threshold, weights."""

    C: float
    inner_auc: float
    test_scores: np.ndarray
    threshold: float
    w: np.ndarray
    b: float


def fit_cell(Xtr: np.ndarray, ytr: np.ndarray, gtr: np.ndarray, Xte: np.ndarray, cfg: ProbeConfig,
             C: float | None = None) -> CellFit:
    """Choose C by grouped inner CV on train (unless given), refit on all of train, score test."""
    folds = group_folds(gtr, cfg.inner_folds, cfg.seed)
    grid = (C,) if C is not None else cfg.C_grid
    best = (-1.0, grid[0], None)
    for c in grid:
        s = oof_scores(Xtr, ytr, folds, c)
        a = _auc_ok(s, ytr)
        a = -1.0 if np.isnan(a) else a
        if a > best[0]:
            best = (a, c, s)
    a_in, c_star, s_oof = best
    thr_scores = s_oof if s_oof is not None else oof_scores(Xtr, ytr, folds, c_star)
    A, B = standardise(Xtr, Xte)
    w, b = fit_logreg(A, ytr, C=c_star)
    thr = youden_threshold(thr_scores, ytr) if not np.isnan(thr_scores).all() else 0.0
    return CellFit(c_star, float(a_in), B @ w + b, thr, w, b)


def check_labels(ytr: np.ndarray, yte: np.ndarray, min_per_class: int) -> None:
    ntr, nte = np.bincount(ytr.astype(int), minlength=2), np.bincount(yte.astype(int), minlength=2)
    if ntr.min() < min_per_class or nte.min() < max(1, min_per_class // 2):
        raise DegenerateLabels(f"too few samples per class: train comply/refuse = {ntr[0]}/{ntr[1]}, test = "
                               f"{nte[0]}/{nte[1]} (need ≥ {min_per_class} in train and ≥ {min_per_class // 2} "
                               "in test)")


def permute_within_sizes(y: np.ndarray, prompts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Labels with whole prompts' label vectors permuted among prompts that have the same number of samples."""
    out = y.copy()
    uniq, inv, counts = np.unique(prompts, return_inverse=True, return_counts=True)
    rows = [np.flatnonzero(inv == i) for i in range(uniq.size)]
    for size in np.unique(counts):
        ids = np.flatnonzero(counts == size)
        perm = rng.permutation(ids)
        for src, dst in zip(ids, perm):
            out[rows[dst]] = y[rows[src]]
    return out


@dataclass
class ProbeGrid:
    """Test metrics of every (position, layer) cell, with controls.

    ``auroc`` [P, L] with ``auroc_ci`` [P, L, 2] (template bootstrap); ``inner_auc`` [P, L] (train, chooses
    ``best_layer`` per position); ``bal_acc`` [P, L]; ``null_lo``/``null_hi`` [P, L] (2.5/97.5 % of shuffled-label
    refits) and ``null`` [P, L, n_shuffles]."""

    positions: list[str]
    layers: list[int]
    label_source: str
    auroc: np.ndarray
    auroc_ci: np.ndarray
    inner_auc: np.ndarray
    bal_acc: np.ndarray
    null: np.ndarray
    best_layer: dict[str, int]
    fits: dict[tuple[int, int], CellFit] = field(repr=False, default_factory=dict)
    n_train: int = 0
    n_test: int = 0

    def headline(self, position: str) -> tuple[int, float, tuple[float, float]]:
        p = self.positions.index(position)
        li = self.layers.index(self.best_layer[position])
        return self.best_layer[position], float(self.auroc[p, li]), tuple(self.auroc_ci[p, li])

    def to_dict(self) -> dict:
        return {"positions": self.positions, "layers": self.layers, "label_source": self.label_source,
                "auroc": self.auroc.round(4).tolist(), "auroc_ci": self.auroc_ci.round(4).tolist(),
                "inner_auc": self.inner_auc.round(4).tolist(), "bal_acc": self.bal_acc.round(4).tolist(),
                "null_lo": np.nanpercentile(self.null, 2.5, axis=-1).round(4).tolist() if self.null.size else [],
                "null_hi": np.nanpercentile(self.null, 97.5, axis=-1).round(4).tolist() if self.null.size else [],
                "best_layer": self.best_layer, "n_train": self.n_train, "n_test": self.n_test}


def auroc_estimate(scores: np.ndarray, y: np.ndarray, groups: np.ndarray, *, n_boot: int, seed: int) -> Estimate:
    """Test AUROC with a percentile bootstrap over templates (clusters)."""
    return cluster_bootstrap(lambda rows: auroc(scores[rows], y[rows]), groups, n_boot=n_boot, seed=seed)


def fit_probes(Htr: np.ndarray, ytr: np.ndarray, gtr: np.ndarray, ptr: np.ndarray, Hte: np.ndarray, yte: np.ndarray,
               gte: np.ndarray, *, positions: Sequence[str], layers: Sequence[int], label_source: str = "vote",
               cfg: ProbeConfig = ProbeConfig(), shuffle_cells: bool = True) -> ProbeGrid:
    """Probes for every cell of ``H`` [N, P, L, d] (train and test sets of rows; ``g`` template ids, ``p`` prompt
    ids). Rows with a NaN state at a position are dropped for that position (counted by the caller's mask)."""
    check_labels(ytr, yte, cfg.min_per_class)
    P, L = len(positions), len(layers)
    auc = np.full((P, L), np.nan)
    ci = np.full((P, L, 2), np.nan)
    inner = np.full((P, L), np.nan)
    bacc = np.full((P, L), np.nan)
    null = np.full((P, L, cfg.n_shuffles if shuffle_cells else 0), np.nan)
    fits: dict[tuple[int, int], CellFit] = {}
    rng = np.random.default_rng(cfg.seed)
    perms = [permute_within_sizes(ytr, ptr, rng) for _ in range(cfg.n_shuffles)] if shuffle_cells else []
    for p in range(P):
        oktr = ~np.isnan(Htr[:, p, 0, 0])
        okte = ~np.isnan(Hte[:, p, 0, 0])
        for li in range(L):
            Xtr, Xte = Htr[oktr, p, li].astype(np.float64), Hte[okte, p, li].astype(np.float64)
            fit = fit_cell(Xtr, ytr[oktr], gtr[oktr], Xte, cfg)
            fits[(p, li)] = fit
            y_t = yte[okte]
            est = auroc_estimate(fit.test_scores, y_t, gte[okte], n_boot=cfg.bootstrap, seed=cfg.seed)
            auc[p, li], ci[p, li] = est.value, (est.lo, est.hi)
            inner[p, li] = fit.inner_auc
            bacc[p, li] = balanced_accuracy(fit.test_scores >= fit.threshold, y_t)
            for s, yp in enumerate(perms):
                A, B = standardise(Xtr, Xte)
                w, b = fit_logreg(A, yp[oktr], C=fit.C)  # C* of the real fit: the null of the refit, not of C
                null[p, li, s] = _auc_ok(B @ w + b, y_t)
    best = {pos: int(layers[int(np.nanargmax(np.where(np.isnan(inner[p]), -1, inner[p])))])
            for p, pos in enumerate(positions)}
    return ProbeGrid(list(positions), list(layers), label_source, auc, ci, inner, bacc, null, best, fits,
                     len(ytr), len(yte))


def permutation_p(Xtr: np.ndarray, ytr: np.ndarray, ptr: np.ndarray, Xte: np.ndarray, yte: np.ndarray, C: float,
                  real: float, *, n_perm: int, seed: int) -> tuple[float, list[float]]:
    """p = (1 + #{null ≥ real}) / (1 + n_perm) over within-size prompt permutations of the train labels."""
    rng = np.random.default_rng([seed, 99])
    A, B = standardise(Xtr, Xte)
    nulls = []
    for _ in range(n_perm):
        w, b = fit_logreg(A, permute_within_sizes(ytr, ptr, rng), C=C)
        nulls.append(_auc_ok(B @ w + b, yte))
    arr = np.array(nulls)
    return float((1 + np.sum(arr >= real)) / (1 + n_perm)), arr.tolist()


# ----------------------------------------------------------------------------------------------- baselines
def emitted_token_auroc(tok_tr: np.ndarray, ytr: np.ndarray, tok_te: np.ndarray, yte: np.ndarray) -> float:
    """The paper's "emitted word" probe: logistic regression on the one-hot id of the token at the position."""
    vocab = np.unique(np.concatenate([tok_tr, tok_te]))
    one = lambda t: (t[:, None] == vocab[None]).astype(float)  # noqa: E731
    w, b = fit_logreg(one(tok_tr), ytr, C=1.0)
    return _auc_ok(one(tok_te) @ w + b, yte)


def bow(texts: Sequence[str], vocab: dict[str, int] | None = None) -> tuple[np.ndarray, dict[str, int]]:
    import re

    toks = [re.findall(r"[a-z']+", t.lower()) for t in texts]
    feats = [w + [f"{a} {b}" for a, b in zip(w, w[1:])] for w in toks]
    if vocab is None:
        vocab = {f: i for i, f in enumerate(sorted({f for fs in feats for f in fs}))}
    X = np.zeros((len(texts), len(vocab)))
    for i, fs in enumerate(feats):
        for f in fs:
            j = vocab.get(f)
            if j is not None:
                X[i, j] = 1.0
    idf = np.log((1 + len(texts)) / (1 + X.sum(0))) + 1
    return X * idf, vocab


def prompt_text_auroc(text_tr: Sequence[str], ytr: np.ndarray, text_te: Sequence[str], yte: np.ndarray) -> float:
    """Logistic regression on TF-IDF-weighted unigrams+bigrams of the user message."""
    Xtr, vocab = bow(text_tr)
    Xte, _ = bow(text_te, vocab)
    w, b = fit_logreg(Xtr, ytr, C=1.0)
    return _auc_ok(Xte @ w + b, yte)


def ceiling_auroc(y: np.ndarray, prompts: np.ndarray) -> float:
    """Cross-fitted prompt determinism: each sample scored by the refuse rate of the *other* samples of its
    prompt (needs K ≥ 2 per prompt; prompts with one sample are dropped)."""
    s = np.full(len(y), np.nan)
    for pid in np.unique(prompts):
        rows = np.flatnonzero(prompts == pid)
        if rows.size < 2:
            continue
        tot = y[rows].sum()
        s[rows] = (tot - y[rows]) / (rows.size - 1)
    return _auc_ok(s, y)


def diff_means(Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, yte: np.ndarray,
               w_probe: np.ndarray) -> tuple[float, float]:
    """AUROC of the projection on the train difference-of-means direction (Arditi-style) on standardised states,
    and its cosine with the probe's weight vector."""
    A, B = standardise(Xtr, Xte)
    d = A[ytr == 1].mean(0) - A[ytr == 0].mean(0)
    cos = float(d @ w_probe / (np.linalg.norm(d) * np.linalg.norm(w_probe) + 1e-12))
    return _auc_ok(B @ d, yte), cos
