"""Draft proposers. ``NgramProposer`` is prompt lookup (Saxena 2023; vLLM's ``ngram`` speculative method): find
the most recent earlier occurrence of the context's last n tokens and propose what followed it. Deterministic, so
its q is one-hot (``Proposal.q`` = None) and it carries no confidences."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NgramProposer:
    """Longest match first, n from ``n_max`` down to ``n_min``; at most ``k`` tokens proposed."""

    n_max: int = 4
    n_min: int = 1
    k: int = 4
    deterministic: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.n_min <= self.n_max or self.k < 1:
            raise ValueError("need 1 <= n_min <= n_max and k >= 1")

    @property
    def max_len(self) -> int:
        return self.k

    def propose_one(self, history: Sequence[int], limit: int | None = None) -> list[int]:
        """Draft for one context (prompt + committed tokens); empty when nothing matches."""
        k = self.k if limit is None else min(self.k, limit)
        if k <= 0:
            return []
        h = list(history)
        for n in range(min(self.n_max, len(h) - 1), self.n_min - 1, -1):
            tail = h[-n:]
            # most recent earlier occurrence whose continuation exists
            for start in range(len(h) - n - 1, -1, -1):
                if h[start: start + n] == tail:
                    return h[start + n: start + n + k]
        return []
