"""The sealed decision anchor: judges are compared on it; nothing hands out its items or labels.

Anchor hygiene [R]: the items and labels live in a closure, not in attributes, so no object graph reached from an
:class:`~agentmill.methods.red_queen.archive.ArchiveView` (what challenger generators see) can reach them, and
only counts come out. Adaptive reuse of one anchor overfits it slowly (Blum & Hardt's reusable-holdout argument),
so :attr:`SealedAnchor.tests_run` counts every comparison run against it and the run reports the number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class PairedCounts:
    """A paired comparison on the anchor: ``n`` items; ``both`` right, ``inc_only``, ``ch_only``, ``neither``."""

    n: int
    both: int
    inc_only: int
    ch_only: int
    neither: int


class SealedAnchor:
    """``items`` (anything a judge's ``accept`` takes) and binary ``labels``, held privately."""

    __slots__ = ("_correct", "_size", "tests_run")

    def __init__(self, items: Any, labels: Any) -> None:
        y = np.asarray(labels).astype(int).copy()
        n = int(y.shape[0])
        if n == 0:
            raise ValueError("the anchor is empty")
        held = (items, y)

        def correct(judge: Any) -> np.ndarray:
            acc = np.asarray(judge.accept(held[0])).astype(int)
            if acc.shape != held[1].shape:
                raise ValueError(f"judge {getattr(judge, 'judge_id', judge)} returned {acc.shape} decisions for "
                                 f"{held[1].shape[0]} anchor items")
            return acc == held[1]

        self._correct: Callable[[Any], np.ndarray] = correct
        self._size = n
        self.tests_run = 0

    def __len__(self) -> int:
        return self._size

    def counts(self, judge: Any) -> tuple[int, int]:
        """(S, F): anchor items the judge gets right / wrong."""
        ok = self._correct(judge)
        self.tests_run += 1
        return int(ok.sum()), int((~ok).sum())

    def compare(self, incumbent: Any, challenger: Any) -> PairedCounts:
        a, b = self._correct(incumbent), self._correct(challenger)
        self.tests_run += 1
        return PairedCounts(self._size, int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()),
                            int((~a & ~b).sum()))

    def __reduce__(self):  # never pickled or copied out with its items
        raise TypeError("a SealedAnchor cannot be pickled: its items and labels stay sealed")
