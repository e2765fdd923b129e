"""Baselines beside the learned head: single workers, best single (chosen on validation), random, kNN
(similarity-weighted ranking, k = 20, RouteLLM-style), the abstention cascade (cheapest first, first non-abstaining
answer wins; FrugalGPT-like without a learned scorer) and the oracle (any worker right)."""

from __future__ import annotations

import numpy as np


def best_single(Y_val: np.ndarray) -> int:
    """Index of the worker with the highest validation accuracy (ties → lower index)."""
    return int(np.argmax(Y_val.mean(axis=0)))


def random_route(n: int, m: int, seed: int = 0, allowed: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(allowed) if allowed is not None else np.arange(m)
    return rng.choice(idx, size=n)


def knn_route(X_train: np.ndarray, Y_train: np.ndarray, X: np.ndarray, k: int = 20,
              allowed: np.ndarray | None = None) -> np.ndarray:
    """Per query: the k most cosine-similar training queries vote Σ sim · Y[train, w]; argmax over allowed workers."""
    S = X @ X_train.T
    S = S.toarray() if hasattr(S, "toarray") else np.asarray(S)
    k = min(k, X_train.shape[0])
    top = np.argpartition(-S, k - 1, axis=1)[:, :k]
    sims = np.take_along_axis(S, top, axis=1)
    scores = np.einsum("nk,nkm->nm", np.clip(sims, 0, None), Y_train[top])
    if allowed is not None:
        scores = np.where(allowed[None, :], scores, -np.inf)
    return np.argmax(scores, axis=1)


def cascade(abstain: np.ndarray, Y: np.ndarray, C: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                            np.ndarray]:
    """Try workers in ``order``; accept the first that does not abstain. Returns (per-query score, per-query cost =
    sum of the tried workers' costs, accepted worker index or -1)."""
    n = Y.shape[0]
    score, cost, chosen = np.zeros(n), np.zeros(n), np.full(n, -1)
    for q in range(n):
        for w in order:
            cost[q] += C[q, w]
            if not abstain[q, w]:
                score[q], chosen[q] = Y[q, w], w
                break
    return score, cost, chosen
