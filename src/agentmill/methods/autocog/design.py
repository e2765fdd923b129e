"""Designs and schedules ([C]): validities v, rating range R, U unique pairs repeated K times."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from agentmill.methods.autocog.theory import sha256

MAX_TRIALS = 96  # after Hilbig & Moshagen (2014) [C `src/heuristic_decision_making/experiment.py`]


@dataclass(frozen=True)
class Design:
    """validities (F,), rating_max R, pairs_a/pairs_b (U, F) integer ratings in [0, R]."""

    validities: tuple[float, ...]
    pairs_a: tuple[tuple[int, ...], ...]
    pairs_b: tuple[tuple[int, ...], ...]
    rating_max: int = 1
    max_trials: int = MAX_TRIALS
    rationale: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        v, F = self.validities, len(self.validities)
        if not 2 <= F <= 8:
            raise ValueError(f"design.validities: need 2..8 features, got {F}")
        if any(not 0.5 <= x <= 1 for x in v):
            raise ValueError(f"design.validities: every validity must be in [0.5, 1], got {list(v)}")
        if len(self.pairs_a) != len(self.pairs_b):
            raise ValueError(f"design.pairs_a/pairs_b: unequal lengths {len(self.pairs_a)} vs {len(self.pairs_b)}")
        if not 1 <= len(self.pairs_a) <= 96:
            raise ValueError(f"design.pairs_a: need 1..96 unique pairs, got {len(self.pairs_a)}")
        if not 1 <= self.rating_max <= 10:
            raise ValueError(f"design.rating_max: need 1..10, got {self.rating_max}")
        for nm, rows in (("pairs_a", self.pairs_a), ("pairs_b", self.pairs_b)):
            for i, r in enumerate(rows):
                if len(r) != F:
                    raise ValueError(f"design.{nm}[{i}]: length {len(r)} != n_features {F}")
                if any((not isinstance(x, (int, np.integer))) or not 0 <= x <= self.rating_max for x in r):
                    raise ValueError(f"design.{nm}[{i}]: ratings must be integers in [0, {self.rating_max}], got {r}")
        if any(a == b for a, b in zip(self.pairs_a, self.pairs_b)):
            warnings.warn("design has A ≡ B pairs: every rule gives 1/2 on them", stacklevel=2)

    @classmethod
    def make(cls, validities, pairs_a, pairs_b, rating_max: int = 1, **kw) -> Design:
        return cls(tuple(float(x) for x in validities), tuple(tuple(int(x) for x in r) for r in pairs_a),
                   tuple(tuple(int(x) for x in r) for r in pairs_b), int(rating_max), **kw)

    @property
    def n_features(self) -> int:
        return len(self.validities)

    @property
    def n_unique(self) -> int:
        return len(self.pairs_a)

    @property
    def repeats(self) -> int:
        return max(1, self.max_trials // self.n_unique)

    @property
    def n_trials(self) -> int:
        return self.repeats * self.n_unique

    def context(self) -> dict:
        return {"validities": np.asarray(self.validities), "n_features": self.n_features,
                "rating_max": self.rating_max}

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.pairs_a, float), np.asarray(self.pairs_b, float)

    def to_json(self) -> dict:
        return {"validities": list(self.validities), "rating_max": self.rating_max,
                "pairs_a": [list(r) for r in self.pairs_a], "pairs_b": [list(r) for r in self.pairs_b],
                "max_trials": self.max_trials, "rationale": self.rationale}

    @classmethod
    def from_json(cls, d: dict) -> Design:
        return cls.make(d["validities"], d["pairs_a"], d["pairs_b"], d.get("rating_max", 1),
                        max_trials=d.get("max_trials", MAX_TRIALS), rationale=d.get("rationale", ""))

    def content_id(self) -> str:
        return self._content_id

    @cached_property
    def _content_id(self) -> str:
        """Hashed once per (immutable) design: metrics look it up on every evaluation."""
        j = self.to_json()
        j.pop("rationale")
        return sha256(j)[:16]

    def schedules(self, rng: np.random.Generator, n_subjects: int) -> np.ndarray:
        """Pair index per (subject, trial): the U pairs replicated K times, shuffled per subject [R] (the
        repository shuffles once per design, unseeded)."""
        base = np.tile(np.arange(self.n_unique), self.repeats)
        return rng.permuted(np.broadcast_to(base, (n_subjects, base.size)), axis=1)


_VALIDITY_GRID = np.round(np.arange(0.50, 0.951, 0.05), 2)
_VALIDITY_GRID.setflags(write=False)


def random_design(rng: np.random.Generator, *, n_features: int = 4, rating_max: int = 1,
                  n_unique: tuple[int, int] = (6, 12), exclude_pairs: frozenset = frozenset()) -> Design:
    """SearchAdvocate designs [R]: v sorted distinct from {0.50, 0.55, ..., 0.95}; U in [6, 12]; no A ≡ B pairs;
    no pair (or its A↔B mirror) from ``exclude_pairs`` (the held-out battery)."""
    v = tuple(sorted(rng.choice(_VALIDITY_GRID, n_features, replace=False).tolist(), reverse=True))
    U = int(rng.integers(n_unique[0], n_unique[1] + 1))
    pa, pb, seen = [], [], set()
    for _ in range(10_000):
        if len(pa) == U:
            break
        a = tuple(rng.integers(0, rating_max + 1, n_features).tolist())  # tolist: Python ints, as int(x) gave
        b = tuple(rng.integers(0, rating_max + 1, n_features).tolist())
        if a == b or (a, b) in seen or (b, a) in seen or (a, b) in exclude_pairs or (b, a) in exclude_pairs:
            continue
        seen.add((a, b))
        pa.append(a)
        pb.append(b)
    return Design.make(v, pa, pb, rating_max)


def catch_pairs(n_features: int, rating_max: int, n: int = 4) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Dominance pairs (A ≥ B on every cue, > on all): every library rule makes the same deterministic choice."""
    out = []
    for k in range(n):
        a = tuple([rating_max] * n_features)
        b = tuple([0] * n_features)
        out.append((a, b) if k % 2 == 0 else (b, a))
    return out
