"""Cliff types from the next-token distribution at (q, y_<t) [P]: greedy = tie-aware competition rank 1 (ties
within 1e-9 in log-prob share rank 1, the Cliff-token code's ``entropy.py``); H* = H_b(0.99) = 0.05600 nats.
DF: greedy ∧ H ≤ H*; UC: greedy ∧ H > H*; SO: ¬greedy ∧ H > H*; other: ¬greedy ∧ H ≤ H*.

agentmill's default entropy is the full-vocabulary entropy of the tempered rollout policy (``entropy="full",
dist="policy"``); the paper's is the top-20 partial sum over raw (T = 1) log-probs, a lower bound (``"top20"``,
``"raw"``). Bound [D]: with H ≤ H_b(0.99) the greedy token has π ≥ 0.99, so a DF token's true drop is ≤ 0.01.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from agentmill.methods.cliff_tokens.potential import next_token_logp

TIE = 1e-9


def h_star(p_star: float = 0.99) -> float:
    return -(p_star * math.log(p_star) + (1 - p_star) * math.log(1 - p_star))


@dataclass(frozen=True)
class CliffType:
    pos: int
    kind: Literal["DF", "UC", "SO", "other"]
    rank: int
    entropy: float
    prob: float


def entropy_of(logp: np.ndarray, how: str = "full") -> float:
    p = np.exp(logp)
    fin = np.isfinite(logp) & (p > 0)
    if how == "full":
        return float(-(p[fin] * logp[fin]).sum())
    if how == "top20":
        top = np.argsort(-np.where(fin, logp, -np.inf))[:20]
        top = top[fin[top]]
        return float(-(p[top] * logp[top]).sum())
    raise ValueError(f"entropy must be 'full' or 'top20', got {how!r}")


def type_token(logp: np.ndarray, token: int, *, entropy: str = "full", p_star: float = 0.99) -> tuple[str, int, float]:
    """(kind, tie-aware rank, entropy) of ``token`` under the log-distribution ``logp``."""
    rank = 1 + int(np.sum(logp > logp[token] + TIE))
    h = entropy_of(logp, entropy)
    greedy, low = rank == 1, h <= h_star(p_star)
    kind = ("DF" if low else "UC") if greedy else ("other" if low else "SO")
    return kind, rank, h


def classify(lm: Any, prompt_ids: Sequence[int], trace_ids: Sequence[int], positions: Sequence[int], *,
             entropy: str = "full", dist: str = "policy", temperature: float = 1.0, p_star: float = 0.99
             ) -> list[CliffType]:
    """Types of trace tokens at 1-based ``positions`` (cliff positions): the distribution at (q, y_<pos)."""
    if dist not in ("policy", "raw"):
        raise ValueError(f"dist must be 'policy' or 'raw', got {dist!r}")
    out = []
    for pos in positions:
        logp = next_token_logp(lm, prompt_ids, list(trace_ids[: pos - 1]), temperature if dist == "policy" else 1.0)
        tok = int(trace_ids[pos - 1])
        kind, rank, h = type_token(logp, tok, entropy=entropy, p_star=p_star)
        out.append(CliffType(pos, kind, rank, h, float(np.exp(logp[tok]))))  # type: ignore[arg-type]
    return out
