"""PTS-style bisection for drops (Pivotal Token Search, Phi-4 report arXiv:2412.08905; codelion/pts ``core.py``:
threshold 0.2, 10 samples [P]), confirmed by the cliff test.

Estimate V̂ at both ends of a segment; if they differ by at least ``threshold`` and the segment is longer than one
token, split at the midpoint and recurse; a one-token segment with a drop ≥ threshold is a candidate, confirmed by
fresh estimates at ``confirm_n`` and the z-test. Cost O(#drops · log T · n) instead of O(T · n); a drop cancelled by
a recovery inside one segment is missed [D]."""

from __future__ import annotations

from typing import Sequence

from agentmill.methods.cliff_tokens.potential import PotentialEstimator
from agentmill.methods.cliff_tokens.ztest import Cliff, CliffTest, is_cliff, z_and_p


def bisect_drops(est: PotentialEstimator, prompt_ids: Sequence[int], trace_ids: Sequence[int], *,
                 threshold: float = 0.2, n: int = 32, confirm_n: int = 64, test: CliffTest = CliffTest(),
                 seed_key: Sequence[int] = (0,), evaluated: dict[int, tuple[int, int]] | None = None,
                 candidates: list[int] | None = None) -> tuple[list[Cliff], dict[str, int]]:
    """(confirmed cliffs, cost) over potential positions 0..T−1 of one trace; cost counts estimates and rollouts.
    ``evaluated`` (filled when given) maps each position the search estimated to its (k, n); ``candidates`` gets
    the one-token segments with a drop ≥ ``threshold`` before confirmation."""
    trace = [int(t) for t in trace_ids]
    memo: dict[int, float] = {}
    cost = {"estimates": 0, "rollouts": 0}

    def v(t: int) -> float:
        if t not in memo:
            k, m = est.at(prompt_ids, trace[:t], n, seed_key=(*seed_key, 31, t))
            cost["estimates"] += 1
            cost["rollouts"] += n
            memo[t] = k / m if m else float("nan")
            if evaluated is not None:
                evaluated[t] = (int(k), int(m))
        return memo[t]

    cands: list[int] = []

    def rec(a: int, b: int) -> None:
        if abs(v(b) - v(a)) < threshold:
            return
        if b - a == 1:
            if v(a) - v(b) >= threshold:
                cands.append(b)
            return
        mid = (a + b) // 2
        rec(a, mid)
        rec(mid, b)

    last = len(trace) - 1
    if last >= 1:
        rec(0, last)
    if candidates is not None:
        candidates.extend(sorted(cands))
    out = []
    for b in sorted(cands):
        kp, np_ = est.at(prompt_ids, trace[: b - 1], confirm_n, seed_key=(*seed_key, 32, b, 0))
        kc, nc = est.at(prompt_ids, trace[:b], confirm_n, seed_key=(*seed_key, 32, b, 1))
        cost["estimates"] += 2
        cost["rollouts"] += 2 * confirm_n
        if np_ >= 2 and nc >= 2 and is_cliff(kp, np_, kc, nc, test):
            zs, p = z_and_p(kp, np_, kc, nc, test)
            out.append(Cliff(b, trace[b - 1], kp, np_, kc, nc, kp / np_ - kc / nc, zs, p))
    return out, cost
