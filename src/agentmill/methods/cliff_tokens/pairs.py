"""One-token preference pairs at cliffs (the Cliff-token code's ``vllm_rollout.py`` / ``build_dpo_pairs.py`` [P]).

At a cliff the top-10 tokens of (q, y_<t) are forced and their potentials estimated (n = 64; the cliff token reuses
V̂_t). ``cliff_1N``: rejected = y_t, chosen = every candidate that is not a cliff against V̂_{t−1} under the same
test; ``cliff_hard``: also V̂(x) ≥ V̂_{t−1}. Type subsets filter on the cliff's type."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from agentmill.methods.cliff_tokens.ztest import CliffTest, is_cliff


@dataclass(frozen=True)
class TokenPair:
    prefix_ids: tuple[int, ...]      # prompt + y_<t
    chosen: int
    rejected: int
    cliff_type: str
    k_prev: int
    k_chosen: int
    k_rejected: int

    def __post_init__(self) -> None:
        if self.chosen == self.rejected:
            raise ValueError(f"TokenPair: chosen == rejected ({self.chosen})")

    def to_dict(self) -> dict:
        return asdict(self)


def build_pairs(cliffs: Iterable[dict], *, strategy: str = "cliff_1N", types: Iterable[str] = ("UC", "SO"),
                test: CliffTest = CliffTest()) -> list[TokenPair]:
    """``cliffs``: dicts with prefix_ids, token, type, k_prev, n_prev, k_curr, n_curr and candidates
    [(token, prob, k, n)]."""
    if strategy not in ("cliff_1N", "cliff_hard"):
        raise ValueError(f"strategy must be cliff_1N or cliff_hard, got {strategy!r}")
    keep = set(types)
    out = []
    for c in cliffs:
        if c["type"] not in keep:
            continue
        for x, _p, kx, nx in c["candidates"]:
            if x == c["token"] or nx < 2:
                continue
            if is_cliff(c["k_prev"], c["n_prev"], kx, nx, test):
                continue
            if strategy == "cliff_hard" and kx / nx < c["k_prev"] / c["n_prev"]:
                continue
            out.append(TokenPair(tuple(c["prefix_ids"]), int(x), int(c["token"]), c["type"], int(c["k_prev"]),
                                 int(kx), int(c["k_curr"])))
    return out


def pair_counts(pairs: Sequence[TokenPair]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pairs:
        out[p.cliff_type] = out.get(p.cliff_type, 0) + 1
    return out
