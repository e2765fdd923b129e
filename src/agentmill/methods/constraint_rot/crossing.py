"""The crossing decomposition (CR-10): how much of the violation rate the summariser explains, and how much the actor.

A grid of (summariser × actor) cells gives a matrix of mean violations; η²_S and η²_A are the shares of its
variance along rows and columns, and the claim is η²_S − 3·η²_A > 0. Intervals come from a two-stage cluster
bootstrap over rule families and episodes. The experiment and ``agentmill constraint-rot crossing`` both use it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, percentile_estimate, two_stage_bootstrap_samples, variance_decomposition
from agentmill.methods.constraint_rot.stats import CLUSTER, UNIT


# -- the decomposition ---------------------------------------------------------------------------------------------
def cell_means(rows: Sequence[Mapping[str, Any]], compactors: Sequence[str], actors: Sequence[str]) -> np.ndarray:
    """``[len(compactors), len(actors)]`` mean violation per (compactor, actor); a missing cell is an error."""
    sums = np.zeros((len(compactors), len(actors)))
    counts = np.zeros_like(sums)
    ci, ai = {c: i for i, c in enumerate(compactors)}, {a: j for j, a in enumerate(actors)}
    for r in rows:
        i, j = ci.get(r["compactor"]), ai.get(r["actor"])
        if i is not None and j is not None:
            sums[i, j] += bool(r["violation"])
            counts[i, j] += 1
    if (counts == 0).any():
        i, j = map(int, np.argwhere(counts == 0)[0])
        raise ValueError(f"cell ({compactors[i]!r}, {actors[j]!r}) has no rows")
    return sums / counts


def eta(x: np.ndarray | Sequence[Sequence[float]]) -> dict[str, float]:
    """η²_S (rows = summarisers), η²_A (columns = actors), the CR-10 margin η²_S − 3·η²_A and the ratio
    η²_S/η²_A (inf when η²_A = 0 < η²_S) of a cell-mean matrix; all NaN when every cell is equal."""
    vd = variance_decomposition(np.asarray(x, dtype=float))
    s, a = vd.eta2_rows, vd.eta2_cols
    ratio = float("nan") if s != s else (s / a if a > 0 else float("inf"))
    return {"eta2_S": s, "eta2_A": a, "margin": s - 3.0 * a, "ratio": ratio}


class _Decomposer:
    """``eta(cell_means(rows))`` memoised on the last rows object, so the several statistics a bootstrap resample
    asks for (η²_S, η²_A, margin) cost one pass over the rows."""

    def __init__(self, compactors: Sequence[str], actors: Sequence[str]):
        self.compactors, self.actors = list(compactors), list(actors)
        self._rows: Any = None
        self._val: dict[str, float] = {}

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        if rows is not self._rows:
            self._rows, self._val = rows, eta(cell_means(rows, self.compactors, self.actors))
        return self._val

    def stat(self, key: str) -> Any:
        return lambda rows: self(rows)[key]


def decomposition(rows: Sequence[Mapping[str, Any]], compactors: Sequence[str], actors: Sequence[str], *,
                  B: int, seed: int = 0) -> dict[str, Estimate]:
    """``eta2_s``, ``eta2_a``, ``eta_margin`` with two-stage cluster-bootstrap percentile CIs (one resample
    evaluates all three; resamples where the matrix is constant are dropped and counted in ``method``)."""
    d = _Decomposer(compactors, actors)
    point = d(rows)
    keys = (("eta2_s", "eta2_S"), ("eta2_a", "eta2_A"), ("eta_margin", "margin"))
    boots = two_stage_bootstrap_samples(rows, [d.stat(k) for _, k in keys], cluster=CLUSTER, unit=UNIT, B=B,
                                        seed=seed)
    n = len({r[CLUSTER] for r in rows})
    return {name: percentile_estimate(point[k], boots[:, j], n=n) for j, (name, k) in enumerate(keys)}
