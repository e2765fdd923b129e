"""Prefix-freeze resampling: keep a rollout's trace up to a freeze point, resample the rest, see whether the
outcome moves [R, following the paper's design].

Freeze points are k = 0 (``think_open``: fresh samples from the prompt) and the token index after every sentence of
the trace (sentences split on ``[.!?]`` + whitespace, mapped to tokens through incremental decoding of the sampled
ids). The base trace is registered in a ``WhiteBoxForker`` tree as a leaf (one teacher-forced pass); each freeze
point k ≥ 1 forks R continuations from it (crop to prompt + k − 1, one refeed token), k = 0 samples R fresh ones from
the kept prompt logits; all points are decoded as one batch, each draw on its own stream
``stream_rng((seed, rollout), k·R + r)``. Agreement ``A(k)`` = share of finished draws whose judged outcome equals
the base outcome; locked at k iff ``A(k') ≥ λ`` for every freeze point k' ≥ k; the lock point is the first such k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.first_token_probe.capture import char_offsets
from agentmill.methods.first_token_probe.config import FreezeConfig
from agentmill.methods.first_token_probe.judges import DEFAULT_ENSEMBLE, label_answers
from agentmill.methods.first_token_probe.traces import CLOSE, parse_completion, sentence_spans


@dataclass
class FreezePoint:
    k: int
    f: float
    sentence: int      # sentences kept (0 = none)
    A: float
    H: float           # outcome entropy (bits) over finished draws
    n_valid: int
    n_unfinished: int


@dataclass
class FreezeCurve:
    """A(k) over the freeze points of one base rollout, with its lock point (None: never locked)."""

    key: str
    base_outcome: int
    T: int
    points: list[FreezePoint]
    lock_index: int | None
    sentences: tuple[str, ...]
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def lock_sentence(self) -> int | None:
        """Sentences kept at the lock point (0 = locked from the prompt)."""
        return None if self.lock_index is None else self.points[self.lock_index].sentence

    def locked_before(self, sentence: int) -> bool:
        """Whether the trace is locked at the boundary before sentence ``sentence`` (0-based): i.e. at the point
        that keeps ``sentence`` sentences."""
        ls = self.lock_sentence
        return ls is not None and ls <= sentence

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "base_outcome": self.base_outcome, "T": self.T, "lock_index": self.lock_index,
                "lock_sentence": self.lock_sentence,
                "points": [p.__dict__ for p in self.points], "counters": self.counters}


def freeze_points(lm: Any, sampled_ids: Sequence[int], text: str) -> tuple[list[tuple[int, int]], int, tuple[str, ...]]:
    """[(k, sentences kept)], the trace length T in tokens, and the sentences. k is the number of sampled tokens
    whose text ends at or before the end of the sentence plus its following space."""
    close_at = text.find(CLOSE.rstrip("\n"))
    trace = text[: close_at if close_at >= 0 else len(text)]
    offs = char_offsets(lm, sampled_ids)
    T = sum(o <= len(trace) for o in offs[1:])
    spans = sentence_spans(trace)
    pts = [(0, 0)]
    for i, (_, end) in enumerate(spans):
        cut = end + 1 if end < len(trace) and trace[end] == " " else end
        k = sum(o <= cut for o in offs[1:])
        if 0 < k <= T and k > pts[-1][0]:
            pts.append((k, i + 1))
    return pts, T, tuple(trace[a:b] for a, b in spans)


def prefix_freeze(lm: Any, rollout: Any, *, cfg: FreezeConfig = FreezeConfig(), judges: Sequence[str] =
                  DEFAULT_ENSEMBLE, seed: int = 0, rollout_id: int = 0, forker: Any = None) -> FreezeCurve:
    """The freeze curve of one finished, judged rollout (``rollout.outcome`` is the base outcome)."""
    from agentmill.lm.fork import BranchRequest, WhiteBoxForker

    if rollout.outcome is None:
        raise ValueError(f"rollout {rollout.key} has no judged outcome (unfinished or abstained)")
    if rollout.prefill:
        raise ValueError("prefix_freeze works on rollouts without a forced prefill")
    fk = forker or WhiteBoxForker(lm)
    ids = np.asarray(rollout.sampled_ids, dtype=np.int32)
    pts, T, sents = freeze_points(lm, ids, rollout.text)
    tree = fk.start_tree(list(rollout.prompt_ids), (int(seed), int(rollout_id)))
    base = fk.add_leaf(tree, ids)
    R = cfg.resamples
    reqs = []
    for k, _ in pts:
        for r in range(R):
            if k == 0:
                reqs.append(BranchRequest(None, 0, ids[:0], k * R + r, cfg.max_new_tokens))
            else:
                reqs.append(BranchRequest(base, k, ids[:k], k * R + r, cfg.max_new_tokens))
    conts = fk.expand(tree, reqs, cfg.temperature)
    texts = [lm.decode(list(ids[: q.pos]) + list(c.token_ids)) for q, c in zip(reqs, conts)]
    parsed = [parse_completion(t) for t in texts]
    _, votes = label_answers([p.answer if p.finished else "" for p in parsed], judges)
    counters = fk.end_tree(tree).to_dict()
    points = []
    for j, (k, ns) in enumerate(pts):
        outs = [votes[j * R + r] for r in range(R) if parsed[j * R + r].finished and votes[j * R + r] is not None]
        n_unf = R - len(outs)
        A = float(np.mean([o == rollout.outcome for o in outs])) if outs else float("nan")
        p1 = float(np.mean(outs)) if outs else float("nan")
        H = 0.0 if not outs or p1 in (0.0, 1.0) else float(-(p1 * np.log2(p1) + (1 - p1) * np.log2(1 - p1)))
        points.append(FreezePoint(int(k), float(k / max(T, 1)), int(ns), A, H, len(outs), n_unf))
    lock = None
    for j in range(len(points) - 1, -1, -1):
        if np.isnan(points[j].A) or points[j].A < cfg.lam:
            break
        lock = j
    return FreezeCurve(rollout.key, int(rollout.outcome), T, points, lock, sents, counters)


def lock_index_at(curve: FreezeCurve, lam: float) -> int | None:
    """The lock point of ``curve`` at another λ (sensitivity table)."""
    lock = None
    for j in range(len(curve.points) - 1, -1, -1):
        a = curve.points[j].A
        if np.isnan(a) or a < lam:
            break
        lock = j
    return lock


def first_point_at(curve: FreezeCurve, f: float) -> FreezePoint | None:
    """The first freeze point with fraction ≥ ``f`` (k ≥ 1)."""
    return next((p for p in curve.points if p.k >= 1 and p.f >= f), None)
