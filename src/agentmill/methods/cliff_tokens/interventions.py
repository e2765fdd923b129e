"""Deletion and causal interventions at a cliff (paper "Cliff-del" / "Cliff-keep" [P]; ban, forced candidates
and the matched random-deletion control are agentmill's [R]).

By construction [D]: a cliff needs V̂_{t−1} ≥ 12/64, and delete-and-resample is a fresh estimate of V_{t−1}, so its
pass@64 is ≥ 1 − (1 − 0.1875)^64 ≈ 1 whenever V_{t−1} is near its estimate; keep-and-resample is a fresh estimate of
V_t, which the test forced low. Together they show that the estimator replicates, not that the token causes the
failure; ban-and-resample (the token's first-step probability set to 0) and forced candidates are the causal tests.
"""

from __future__ import annotations

from math import comb
from typing import Sequence

import numpy as np

from agentmill.methods.cliff_tokens.potential import PotentialEstimator, next_token_logp


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 − C(n−c, k)/C(n, k) (Chen et al., arXiv 2107.03374)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def delete_resample(est: PotentialEstimator, prompt_ids: Sequence[int], trace_ids: Sequence[int], t: int, n: int,
                    seed_key: Sequence[int]) -> tuple[int, int]:
    """n fresh continuations from (q, y_<t); the cliff token may be drawn again."""
    return est.at(prompt_ids, list(trace_ids[: t - 1]), n, seed_key=(*seed_key, 11))


def keep_resample(est: PotentialEstimator, prompt_ids: Sequence[int], trace_ids: Sequence[int], t: int, n: int,
                  seed_key: Sequence[int]) -> tuple[int, int]:
    """n fresh continuations from (q, y_≤t)."""
    return est.at(prompt_ids, list(trace_ids[:t]), n, seed_key=(*seed_key, 12))


def ban_resample(est: PotentialEstimator, prompt_ids: Sequence[int], trace_ids: Sequence[int], t: int, n: int,
                 seed_key: Sequence[int]) -> tuple[int, int]:
    """From (q, y_<t) with y_t's first-step probability set to 0 and the rest renormalised."""
    return est.at(prompt_ids, list(trace_ids[: t - 1]), n, seed_key=(*seed_key, 13), ban=int(trace_ids[t - 1]))


def force_candidates(est: PotentialEstimator, prompt_ids: Sequence[int], trace_ids: Sequence[int], t: int, n: int,
                     seed_key: Sequence[int], *, top_k: int = 10, lm=None) -> list[tuple[int, float, int, int]]:
    """(token, π, k, n) for the top-k tokens x with π(x) > 0 at (q, y_<t): V̂(q, y_<t, x) [P] exp4 / phase B."""
    src = lm if lm is not None else (est.source.lm if hasattr(est.source, "lm") else est.source)
    logp = next_token_logp(src, prompt_ids, list(trace_ids[: t - 1]), est.cfg.temperature)
    order = [int(x) for x in np.argsort(-logp)[:top_k] if np.isfinite(logp[x])]
    out = []
    for x in order:
        k, m = est.at(prompt_ids, list(trace_ids[: t - 1]), n, seed_key=(*seed_key, 14, x), force=x)
        out.append((x, float(np.exp(logp[x])), k, m))
    return out


def random_delete_position(v_prev: np.ndarray, cliff_positions: Sequence[int], target: float,
                           rng: np.random.Generator, tol: float = 0.05) -> int | None:
    """A random non-cliff position u (1-based) whose V̂_{u−1} is within ``tol`` of ``target`` (the matched
    control), or None. ``v_prev[u]`` = V̂ after u − 1 tokens."""
    cand = [u for u in range(1, len(v_prev)) if u not in set(cliff_positions)
            and np.isfinite(v_prev[u - 1]) and abs(v_prev[u - 1] - target) <= tol]
    return int(rng.choice(cand)) if cand else None
