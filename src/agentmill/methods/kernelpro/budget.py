"""How close a search gets to the exhaustive optimum, and at what budget: the near-optimal set of a measured table
(strict, and under the table's own measurement noise), the evaluation at which a search first reaches it, the share
of runs that reach it within each budget, the smallest budget at which that share clears a level on every task, and
the comparison of one returned candidate with the optimum (``agentmill kernelpro optimise --exhaustive``).

A search's best-so-far after B evaluations does not depend on the budget it was started with (the budget is read
only by the loops' stopping test), so one replay at the largest budget gives every smaller budget as a prefix; a
test checks this for MCTS, greedy and random search."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from agentmill.methods.kernelpro.library import Params
from agentmill.methods.kernelpro.tables import MeasuredTable, key

NEAR = 0.95
"""[R] "reaches the optimum": a speed ≥ 95 % of the exhaustive optimum's (K-6's criterion, docs/methods/kernelpro.md)."""


def median_interval(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float, float]:
    """``(median, lo, hi, coverage)``: a distribution-free interval for the median of ``samples`` from order
    statistics [D]: ``[x_(j), x_(n+1-j)]`` covers the median with probability 1 − 2·P(Bin(n, ½) < j); ``j`` is the
    largest index whose coverage is ≥ ``level``, or 1 (the range) when no index reaches it (n ≤ 5 at 0.95: the range
    covers with 1 − 2^(1−n), e.g. 0.9375 at n = 5). Returns NaNs for no samples."""
    x = np.sort(np.asarray([v for v in samples if v == v], float))
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan

    def coverage(j: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(j)) / 2.0 ** n

    j = 1
    while j + 1 <= (n + 1) // 2 and coverage(j + 1) >= level:
        j += 1
    return float(np.median(x)), float(x[j - 1]), float(x[n - j]), coverage(j)


def paired_speeds(row: Mapping[str, Any]) -> list[float]:
    """The per-repeat speeds of a table row: reference time / candidate time of each interleaved pair (the harness
    times the candidate, then the reference, in every repeat), which cancels the host's drift within the pair."""
    c, r = row.get("cand_samples") or [], row.get("ref_samples") or []
    return [b / a for a, b in zip(c, r) if a > 0 and b > 0]


def has_samples(table: MeasuredTable) -> bool:
    """Whether every correct row of ``table`` keeps its timing samples (tables of schema ≥ 3 do)."""
    rows = [r for r in table.rows.values() if r["status"] == "correct"]
    return bool(rows) and all(paired_speeds(r) for r in rows)


def near_optimal(table: MeasuredTable, near: float = NEAR, *, noise: bool = False) -> set[str]:
    """Row keys of the correct candidates that count as reaching the optimum.

    Strict: the table's speed (minima, the speed every replay sees) is ≥ ``near`` × the optimum's. Under noise [R]:
    also every candidate whose paired-speed median interval reaches ``near`` × the lower end of the optimum row's
    interval (its upper end ≥ that), i.e. a candidate a re-measurement could not tell from being within 5 % of the
    optimum; the strict set is always included, so the noisy share is never below the strict one. Needs the rows'
    timing samples (:func:`has_samples`)."""
    ok = {k: r for k, r in table.rows.items() if r["status"] == "correct"}
    opt = table.optimum()
    strict = {k for k, r in ok.items() if r["speedup"] >= near * opt}
    if not noise:
        return strict
    if not has_samples(table):
        raise ValueError(f"table {table.task}/{table.which} keeps no timing samples: no noise-aware optimum")
    best = max(ok, key=lambda k: ok[k]["speedup"])
    _, lo_opt, _, _ = median_interval(paired_speeds(ok[best]))
    return strict | {k for k, r in ok.items() if median_interval(paired_speeds(r))[2] >= near * lo_opt}


def first_hit(evaluated: Iterable[Mapping[str, Any]], keys: set[str], budget: int) -> int:
    """1-based evaluation at which a search first evaluated a candidate in ``keys`` (``budget + 1`` if never);
    ``evaluated`` is ``SearchResult.evaluated`` (its dicts hold ``params``)."""
    for i, e in enumerate(evaluated):
        if key(e["params"]) in keys:
            return i + 1
    return budget + 1


def share_reached(hits: Sequence[int], budget: int) -> tuple[int, int]:
    """``(runs whose first hit is within budget, runs)``."""
    return int(sum(h <= budget for h in hits)), len(hits)


def smallest_budget(shares: Mapping[str, Mapping[str, float]], labels: Sequence[str], level: float = 0.9) -> str | None:
    """The first label of ``labels`` (ordered by budget) at which every task's share is ≥ ``level``, or None.
    ``shares`` is task → label → share."""
    for lab in labels:
        if shares and all(lab in s and s[lab] >= level for s in shares.values()):
            return lab
    return None


def compare_to_optimum(table: MeasuredTable, params: Params | Mapping[str, object], near: float = NEAR
                       ) -> dict[str, Any]:
    """Where candidate ``params`` stands against ``table``'s exhaustive optimum, both on the table's scale (its
    speeds come from one measurement of every candidate, so they are comparable; a live search's own timings are
    not on that scale). ``within`` is None when the candidate is not in the table."""
    ok = {k: r for k, r in table.rows.items() if r["status"] == "correct"}
    best = max(ok, key=lambda k: ok[k]["speedup"])
    opt = float(ok[best]["speedup"])
    row = table.rows.get(key(params))
    sp = float(row["speedup"]) if row is not None and row["status"] == "correct" else math.nan
    return {"optimum_speedup": opt, "optimum_params": dict(ok[best]["params"]), "table_speedup": sp,
            "fraction_of_optimum": sp / opt if sp == sp else math.nan,
            "within": (sp >= near * opt) if row is not None else None, "near": near,
            "in_table": row is not None, "space": table.which}
