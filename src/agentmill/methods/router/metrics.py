"""Routing metrics over an outcome matrix Y (n, m) and a choice vector (n,) of worker indices."""

from __future__ import annotations

import numpy as np


def accuracy(choice: np.ndarray, Y: np.ndarray) -> float:
    return float(Y[np.arange(len(choice)), choice].mean())


def per_query(choice: np.ndarray, M: np.ndarray) -> np.ndarray:
    """M[q, choice[q]] for every query (the paired samples of a bootstrap)."""
    return M[np.arange(len(choice)), choice]


def mean_cost(choice: np.ndarray, C: np.ndarray) -> float:
    return float(C[np.arange(len(choice)), choice].mean())


def shares(choice: np.ndarray, m: int) -> np.ndarray:
    return np.bincount(choice, minlength=m) / max(1, len(choice))


def routing_entropy(choice: np.ndarray, m: int) -> float:
    """Entropy of the routing shares divided by ln m (0 = one worker, 1 = uniform)."""
    s = shares(choice, m)
    nz = s[s > 0]
    return float(-(nz * np.log(nz)).sum() / np.log(m)) if m > 1 else 0.0


def unique_solves(Y: np.ndarray) -> np.ndarray:
    """Boolean (n, m): worker w is the only one with Y = 1 on query q."""
    solved = Y >= 1.0
    return solved & (solved.sum(axis=1, keepdims=True) == 1)


def niche_recall(choice: np.ndarray, Y: np.ndarray, min_count: int = 10) -> dict[int, float]:
    """For each worker with ≥ ``min_count`` unique-solve queries: the share of them routed to it."""
    U = unique_solves(Y)
    out = {}
    for w in range(Y.shape[1]):
        rows = np.flatnonzero(U[:, w])
        if len(rows) >= min_count:
            out[w] = float((choice[rows] == w).mean())
    return out


def oracle(Y: np.ndarray) -> np.ndarray:
    return Y.max(axis=1)


def gap_closure(router_acc: float, best_acc: float, oracle_acc: float) -> float:
    """(router − best) / (oracle − best); NaN when the oracle gains nothing over the best single worker."""
    den = oracle_acc - best_acc
    return float((router_acc - best_acc) / den) if den > 0 else float("nan")
