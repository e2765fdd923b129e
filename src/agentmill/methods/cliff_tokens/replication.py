"""Replication test: re-estimate V̂_{t−1} and V̂_t of every detected cliff with fresh, independent continuations
(n_fresh = 512, new RNG streams) and apply the same test; a cliff replicates iff the fresh pair is a cliff.
Prediction [D]: deterministic-typed cliffs do not replicate under a matched policy; cliffs with real drops do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agentmill.methods.cliff_tokens.potential import PotentialEstimator
from agentmill.methods.cliff_tokens.ztest import Cliff, CliffTest, is_cliff


@dataclass(frozen=True)
class Replication:
    pos: int
    k_prev: int
    n_prev: int
    k_curr: int
    n_curr: int
    replicated: bool


def replicate(est: PotentialEstimator, prompt_ids: Sequence[int], trace_ids: Sequence[int], cliffs: Sequence[Cliff],
              *, n_fresh: int = 512, test: CliffTest = CliffTest(), seed_key: Sequence[int] = (0,)
              ) -> list[Replication]:
    out = []
    trace = list(trace_ids)
    for c in cliffs:
        # the compared earlier position is the previous scored one; with window 1 it is pos − 1
        prev = c.pos - 1
        kp, np_ = est.at(prompt_ids, trace[:prev], n_fresh, seed_key=(*seed_key, 512, c.pos, 0))
        kc, nc = est.at(prompt_ids, trace[:c.pos], n_fresh, seed_key=(*seed_key, 512, c.pos, 1))
        ok = np_ >= 2 and nc >= 2 and bool(is_cliff(kp, np_, kc, nc, test))
        out.append(Replication(c.pos, kp, np_, kc, nc, ok))
    return out
