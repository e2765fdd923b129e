"""The SPS(B) cost table (arXiv:2607.05147 [A]; schema [R]): steps per second of an engine step as a function of the
number of verify tokens B in the step, per bucket of running requests R and context length.

The scheduler multiplies an expected acceptance length by SPS(B), so the table must come from the real engine on
this machine at the serving thread count: the CPU verify curve is steep (measured on this 2-core machine kind: a 1×8
step costs 1.75 single steps), and a flat table would pin every adaptive policy to "verify everything" (SGLang #35413),
hence the warning. Lookup interpolates step *time* linearly in B at the nearest R and context buckets and refuses to
extrapolate past the largest profiled B (``max_B``; the policies cap there). Schema ``agentmill.sps/1``.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
import warnings
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.records import write_text_atomic

SCHEMA = "agentmill.sps/1"


@dataclass
class SPSTable:
    B: list[int]
    r_buckets: list[int]
    ctx_buckets: list[int]
    step_seconds: dict[str, list[float]]
    fingerprint: dict[str, Any] = field(default_factory=dict)
    reps: int = 0
    includes_draft: bool = False
    created: float = 0.0
    raw_step_seconds: dict[str, list[float]] | None = None
    """Medians before the isotonic fit (profiled tables only; for inspection)."""

    def __post_init__(self) -> None:
        self._rows: dict[tuple[int, int], list[float]] = {}
        if sorted(self.B) != list(self.B) or not self.B or self.B[0] < 1:
            raise ValueError("SPS table: B must be increasing positive integers")
        for k, v in self.step_seconds.items():
            if len(v) != len(self.B) or min(v) <= 0:
                raise ValueError(f"SPS table: row {k} must have one positive time per B")
        times = [t for v in self.step_seconds.values() for t in v]
        if max(times) / min(times) < 1.05:
            warnings.warn("SPS table is flat (max/min step time < 1.05): adaptive policies will verify everything",
                          stacklevel=2)

    @property
    def max_B(self) -> int:
        return int(self.B[-1])

    @staticmethod
    def key(r: int, ctx: int) -> str:
        return f"r={r},ctx={ctx}"

    def step_time(self, B: int, R: int, ctx: int) -> float:
        if B < 1:
            raise ValueError("B must be >= 1")
        if B > self.max_B:
            raise ValueError(f"B = {B} beyond the profiled maximum {self.max_B} (no extrapolation)")
        row = self._rows.get((R, ctx))
        if row is None:  # the scheduler asks per step and per candidate: pick the bucket once per (R, ctx)
            r = min(self.r_buckets, key=lambda x: (abs(x - R), x))
            c = min(self.ctx_buckets, key=lambda x: (abs(x - ctx), x))
            row = self._rows[(R, ctx)] = self.step_seconds[self.key(r, c)]
        j = max(bisect_right(self.B, B) - 1, 0)
        if j >= len(self.B) - 1 or self.B[j] >= B:
            return float(row[j])
        # linear in B between the profiled points (what np.interp computes, without its per-call array overhead)
        return float(row[j] + (row[j + 1] - row[j]) / (self.B[j + 1] - self.B[j]) * (B - self.B[j]))

    def sps(self, B: int, R: int = 1, ctx: int = 512) -> float:
        return 1.0 / self.step_time(B, R, ctx)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_function(cls, t: Callable[[int], float], B: Sequence[int], **kw: Any) -> SPSTable:
        """A synthetic table with one bucket (e.g. a jagged ``1 + 0.15(B−1)`` + 0.3 above B = 12 [R])."""
        return cls(list(B), [1], [512], {cls.key(1, 512): [float(t(b)) for b in B]}, **kw)

    @classmethod
    def profile(cls, step_fn: Callable[[int, int, int], float], grid: dict[str, Sequence[int]], *, reps: int = 7,
                warmup: int = 2, fingerprint: dict[str, Any] | None = None) -> SPSTable:
        """Median of ``reps`` timings (after ``warmup``) of ``step_fn(B, R, ctx)`` over the grid (B ≥ R), made
        non-decreasing in B.

        Two guards against a shared machine (docs/methods/dspark.md, deviation 6: plain medians were planned): each
        repetition sweeps every B once (interleaved), so a burst of contention inflates all B alike instead of a few
        points; and the medians get an isotonic (pool-adjacent-violators) fit in B, because a step over more tokens is
        never faster — a table profiled under load had B = 1 at 156 ms and B = 4 at 126 ms, which made one verified
        token look free to the scheduler. The raw medians are kept in ``raw_step_seconds``."""
        Bs, Rs, Cs = list(grid["B"]), list(grid["R"]), list(grid["ctx"])
        rows: dict[str, list[float]] = {}
        raw: dict[str, list[float]] = {}
        for r in Rs:
            for c in Cs:
                bs = [max(b, r) for b in Bs]
                for _ in range(warmup):
                    for bb in bs:
                        step_fn(bb, r, c)
                samples: list[list[float]] = [[] for _ in bs]
                for _ in range(reps):
                    for i, bb in enumerate(bs):
                        samples[i].append(step_fn(bb, r, c))
                med = [statistics.median(x) for x in samples]
                raw[cls.key(r, c)] = med
                rows[cls.key(r, c)] = isotonic_increasing(med)
        fp = {"cpu": platform.processor() or platform.machine(), "torch_threads": None, **(fingerprint or {})}
        table = cls(Bs, Rs, Cs, rows, fp, reps, False, time.time())
        table.raw_step_seconds = raw
        return table

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "fingerprint": self.fingerprint, "includes_draft": self.includes_draft,
                "r_buckets": self.r_buckets, "ctx_buckets": self.ctx_buckets, "B": self.B,
                "step_seconds": self.step_seconds, "reps": self.reps, "stat": "median", "created": self.created,
                **({"raw_step_seconds": self.raw_step_seconds} if self.raw_step_seconds else {})}

    def save(self, path: Path) -> Path:
        return write_text_atomic(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: Path) -> SPSTable:
        d = json.loads(Path(path).read_text())
        if d.get("schema") != SCHEMA:
            raise ValueError(f"{path}: not an {SCHEMA} table (schema {d.get('schema')!r})")
        return cls(d["B"], d["r_buckets"], d["ctx_buckets"], d["step_seconds"], d.get("fingerprint", {}),
                   d.get("reps", 0), d.get("includes_draft", False), d.get("created", 0.0),
                   d.get("raw_step_seconds"))


def isotonic_increasing(y: Sequence[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool adjacent violators): violating neighbours are replaced by their mean.

    >>> isotonic_increasing([3.0, 1.0, 2.0, 5.0])
    [2.0, 2.0, 2.0, 5.0]
    """
    blocks: list[list[float]] = []            # [sum, count]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out: list[float] = []
    for s, n in blocks:
        out += [s / n] * int(n)
    return out


def engine_step_fn(engine: Any) -> Callable[[int, int, int], float]:
    """Time one ragged verify forward of B tokens spread evenly over R requests with ``ctx`` cached tokens each
    (logits on every row, as in a verify step), then roll the KV back. The drafter's share is measured separately
    (``SpecStats.draft_seconds``) and is small (≈ 0.12 of an AR step on this machine kind)."""
    from agentmill.lm.engine import RaggedBatch

    seqs: dict[tuple[int, int], list[int]] = {}
    rng = np.random.default_rng(0)

    def prepared(R: int, ctx: int) -> list[int]:
        if (R, ctx) not in seqs:
            for old in seqs.values():
                for s in old:
                    engine.free(s)
            seqs.clear()
            ids = []
            for _ in range(R):
                s = engine.new_sequence()
                engine.forward(RaggedBatch().add(s, rng.integers(10, engine.vocab_size - 10, ctx).tolist(), "last"))
                ids.append(s)
            seqs[(R, ctx)] = ids
        return seqs[(R, ctx)]

    def step(B: int, R: int, ctx: int) -> float:
        ids = prepared(R, ctx)
        per = [B // R + (1 if i < B % R else 0) for i in range(R)]
        batch = RaggedBatch()
        for s, n in zip(ids, per):
            if n:
                batch.add(s, rng.integers(10, engine.vocab_size - 10, n).tolist(), "all")
        t0 = time.perf_counter()
        engine.forward(batch)
        dt = time.perf_counter() - t0
        for s in ids:
            engine.truncate(s, ctx)
        return dt

    return step
