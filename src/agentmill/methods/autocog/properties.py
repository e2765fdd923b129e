"""Declarative theory properties and their checker ([R]: prose claims about a theory are checked on its code).

Pitfall 20 [S]: the gap between a theory's prose and its code is unaudited in the paper. Here a theory *declares*
checkable properties and the checker tests them on every ordered binary pair and a seeded cardinal sample, so a
prose claim such as "ignores cues after the first discriminating one" is either true of the code or reported with a
counterexample. The properties are planned examples [R] (monotone in each cue, ignores cues after the first
discriminating one, invariant to common rescaling) plus A↔B symmetry; their exact tests are the project's [R].

The theory is evaluated at one "typical" subject (its prior midpoints, :meth:`ParamSpace.midpoint`), history-free.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from agentmill.core.seeding import rng_for

TOL = 1e-12  # float round-off allowance on P(A)
DECISION_TOL = 1e-9  # a P(A) within this of ½ is a tie (as core_sign)


@dataclass(frozen=True)
class PropertyResult:
    name: str
    holds: bool
    n_checked: int
    counterexample: tuple | None = None
    """(option A, option B, detail) of the first violation found."""


def _pa(theory, A: np.ndarray, B: np.ndarray, ctx: dict) -> np.ndarray:
    params = theory.params.midpoint(ctx)
    prev = np.full((1, 1), -1) if theory.history_dependent else None
    return np.asarray(theory.prob_batch(params, A[None].astype(float), B[None].astype(float), ctx, prev), float)[0]


def _decision(p: np.ndarray) -> np.ndarray:
    return np.where(p > 0.5 + DECISION_TOL, 1, np.where(p < 0.5 - DECISION_TOL, -1, 0))


def _first_bad(bad: np.ndarray, A: np.ndarray, B: np.ndarray, detail: str) -> tuple | None:
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    return (A[i].astype(int).tolist(), B[i].astype(int).tolist(), detail)


def symmetric(theory, A, B, ctx) -> PropertyResult:
    """P(A | a, b) = 1 − P(A | b, a): the option's position does not matter."""
    p, q = _pa(theory, A, B, ctx), _pa(theory, B, A, ctx)
    bad = np.abs(p + q - 1) > TOL
    return PropertyResult("symmetric", not bad.any(), len(A), _first_bad(bad, A, B, "P(A|a,b) + P(A|b,a) != 1"))


def monotone(theory, A, B, ctx) -> PropertyResult:
    """Raising any one rating of option A by 1 (within the scale) never lowers P(A)."""
    R = ctx["rating_max"]
    p0 = _pa(theory, A, B, ctx)
    n, first = 0, None
    for i in range(A.shape[1]):
        ok = A[:, i] < R
        A2 = A.copy()
        A2[ok, i] += 1
        bad = ok & (_pa(theory, A2, B, ctx) < p0 - TOL)
        n += int(ok.sum())
        first = first or _first_bad(bad, A, B, f"raising cue {i} of A lowers P(A)")
    return PropertyResult("monotone", first is None, n, first)


def lexicographic(theory, A, B, ctx) -> PropertyResult:
    """Ignores every cue after the first discriminating one in descending-validity order (stable ties): changing
    option A's rating on any later cue leaves P(A) unchanged (TTB's defining property)."""
    R = ctx["rating_max"]
    order = np.argsort(-np.asarray(ctx["validities"], float), kind="stable")
    d = (A - B)[:, order] != 0
    has = d.any(1)
    first = np.where(has, d.argmax(1), A.shape[1])
    p0 = _pa(theory, A, B, ctx)
    n, bad_first = 0, None
    for pos, cue in enumerate(order):
        later = has & (pos > first)
        A2 = A.copy()
        A2[later, cue] = np.where(A[later, cue] < R, A[later, cue] + 1, A[later, cue] - 1)
        bad = later & (np.abs(_pa(theory, A2, B, ctx) - p0) > TOL)
        n += int(later.sum())
        bad_first = bad_first or _first_bad(bad, A, B, f"changing cue {cue} after the first discriminating cue "
                                                      "changes P(A)")
    return PropertyResult("lexicographic", bad_first is None, n, bad_first)


def scale_invariant(theory, A, B, ctx) -> PropertyResult:
    """Multiplying both options' ratings by 2 (pairs whose ratings stay within the scale) leaves the decision (the
    sign of P(A) − ½) unchanged. Only pairs that fit the doubled scale are checked (none on binary cues)."""
    R = ctx["rating_max"]
    ok = (np.maximum(A, B).max(1) * 2 <= R) & (A != B).any(1)
    if not ok.any():
        return PropertyResult("scale_invariant", True, 0)
    d0 = _decision(_pa(theory, A[ok], B[ok], ctx))
    d1 = _decision(_pa(theory, 2 * A[ok], 2 * B[ok], ctx))
    bad = d0 != d1
    return PropertyResult("scale_invariant", not bad.any(), int(ok.sum()),
                          _first_bad(bad, A[ok], B[ok], "doubling every rating changes the decision"))


PROPERTIES: dict[str, Callable] = {"symmetric": symmetric, "monotone": monotone, "lexicographic": lexicographic,
                                   "scale_invariant": scale_invariant}

DECLARED: dict[str, tuple[str, ...]] = {
    # [R] what each library rule's prose implies ; the checker verifies it against the code
    "ttb": ("symmetric", "monotone", "lexicographic", "scale_invariant"),
    "tallying": ("symmetric", "monotone", "scale_invariant"),
    "ew": ("symmetric", "monotone", "scale_invariant"),
    "wadd": ("symmetric", "monotone", "scale_invariant"),
    "logodds_wadd": ("symmetric", "monotone", "scale_invariant"),
    "dial": ("symmetric", "monotone", "scale_invariant"),
    "rank_decay": ("symmetric", "monotone", "scale_invariant"),
    "dr_wadd": ("symmetric", "monotone"),
    "take_the_worst": ("symmetric", "monotone"),
    "coin_flip": ("symmetric", "monotone", "lexicographic", "scale_invariant"),
}


def pairs_for(validities, rating_max: int, *, n_cardinal: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered binary pair of F = len(validities) cues (A ≠ B), plus ``n_cardinal`` seeded random pairs on
    the 0..``rating_max`` scale when rating_max > 1 ("all binary pairs and a cardinal sample" [R])."""
    F = len(validities)
    vecs = list(itertools.product((0, 1), repeat=F))
    pairs = [(a, b) for a in vecs for b in vecs if a != b]
    if rating_max > 1:
        rng = rng_for(seed, "properties-cardinal")
        while len(pairs) < len(vecs) * (len(vecs) - 1) + n_cardinal:
            a, b = (tuple(int(x) for x in rng.integers(0, rating_max + 1, F)) for _ in range(2))
            if a != b:
                pairs.append((a, b))
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def check_properties(theory, names: Iterable[str], *, validities=(0.9, 0.8, 0.7, 0.6), rating_max: int = 5,
                     n_cardinal: int = 500, seed: int = 0) -> list[PropertyResult]:
    """Check each named property of ``theory`` on all binary pairs and a cardinal sample."""
    names = list(names)
    unknown = [n for n in names if n not in PROPERTIES]
    if unknown:
        raise ValueError(f"check_properties: unknown properties {unknown}; known: {sorted(PROPERTIES)}")
    A, B = pairs_for(validities, rating_max, n_cardinal=n_cardinal, seed=seed)
    ctx = {"validities": np.asarray(validities, float), "n_features": len(validities), "rating_max": rating_max}
    return [PROPERTIES[n](theory, A, B, ctx) for n in names]
