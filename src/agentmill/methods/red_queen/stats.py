"""The three numbers a Red Queen search decides with: checkpoints, best-belief and the McNemar replacement rule."""

from __future__ import annotations

import math

from agentmill.core.stats import mcnemar_counts


def checkpoints(budget: int, base: int = 2, minimum: int = 8) -> list[int]:
    """``{minimum·base^q ≤ budget} ∪ {budget}``, sorted (re-implementation [C]). Their number is at most
    ⌊log_base(budget/minimum)⌋ + 2, so re-processing at checkpoints stays O(budget)."""
    if minimum < 1 or base < 2 or budget < minimum:
        raise ValueError(f"checkpoints need budget >= minimum >= 1 and base >= 2, got {budget}, {minimum}, {base}")
    out, v = set(), minimum
    while v <= budget:
        out.add(v)
        v *= base
    out.add(budget)
    return sorted(out)


def max_checkpoints(budget: int, minimum: int = 8) -> int:
    """The bound ⌊log₂(budget/minimum)⌋ + 2 on the number of checkpoints (base 2)."""
    return int(math.floor(math.log2(budget / minimum))) + 2


def best_belief(s: int, f: int, eps: float = 0.05) -> float:
    """BB_ε(S, F) = I⁻¹_ε(1 + S, 1 + F): the ε-quantile of Beta(1 + S, 1 + F) [C].
    BB(7, 3) = 0.436, BB(8, 2) = 0.530, BB(9, 1) = 0.636 [D] (tests/methods/red_queen/test_stats.py)."""
    from scipy.special import betaincinv

    if s < 0 or f < 0:
        raise ValueError(f"best_belief needs non-negative counts, got S={s}, F={f}")
    return float(betaincinv(1 + s, 1 + f, eps))


def mcnemar_replace(b: int, c: int, *, alpha: float, n_tests: int) -> tuple[bool, float]:
    """(replace?, p). ``b`` = anchor items only the challenger gets right, ``c`` = only the incumbent. Replace iff
    the one-sided exact p = P(X ≥ b | X ~ Bin(b + c, ½)) < α / n_tests **and** b > c [R]."""
    if n_tests < 1:
        raise ValueError(f"n_tests must be >= 1, got {n_tests}")
    p = float(mcnemar_counts(int(b), int(c), alternative="greater"))
    return (p < alpha / n_tests and b > c), p
