"""Extractive summary: the highest-salience sentences of the summarised span, in their original order.

Score (docs/methods/constraint_rot.md "Use it" 3, [R]): TF-IDF cosine between a sentence and the centroid of the last
two user turns, times exp(−0.1 · age_in_messages) for ``recency_tfidf``; ``tfidf`` drops the recency factor;
``constraint_aware`` is ``recency_tfidf`` with every modality-cue sentence forced in. Sentences are ranked by score
(ties: the later sentence first), near-duplicates (token Jaccard ≥ ``dedupe``) are removed keeping the higher-ranked
one, and the ranking is taken from the top until the next sentence would exceed ``ratio`` × the span's tokens (at least
one sentence is kept). Because the cut is a prefix of a ranking that does not depend on the ratio, a smaller ratio
keeps a subset of the sentences a larger one keeps: survival cannot increase as compression tightens (CR-5).

This is a deterministic salience summariser and the CI target of the eviction attack: a rule sentence that shares
few words with the current task scores low and is evicted, and payloads that flood the task vocabulary (A3) or
dilute the rule's IDF (A4) push it further down. Pure numpy; PF-8 asks for ≤ 50 ms on 2,000 tokens.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import (BaseCompactor, CompactionResult, is_user_turn,
                                                             prefix_sentences)
from agentmill.methods.constraint_rot.messages import count_tokens, is_rule_like, normalise, word_tokens

SCORERS = ("tfidf", "recency_tfidf", "constraint_aware")
RECENCY_DECAY = 0.1  # per message of age [R], docs/methods/constraint_rot.md "Hyperparameters"
QUERY_TURNS = 2


def tfidf_rows(docs: list[list[str]]) -> np.ndarray:
    """L2-normalised TF-IDF rows (raw term counts × smoothed idf = ln((1+N)/(1+df)) + 1), shape (len(docs), V)."""
    vocab: dict[str, int] = {}
    cells: list[int] = []  # row * V + column of every token; V is known only at the end, so rows and columns
    rows: list[int] = []
    for r, d in enumerate(docs):
        for w in d:
            cells.append(vocab.setdefault(w, len(vocab)))
            rows.append(r)
    width = max(len(vocab), 1)
    # raw term counts in one bincount (small integers: exact in float64, whatever the order of the additions)
    flat = np.asarray(rows, dtype=np.int64) * width + np.asarray(cells, dtype=np.int64)
    m = np.bincount(flat, minlength=len(docs) * width).astype(np.float64).reshape(len(docs), width)
    df = (m > 0).sum(axis=0)
    m *= np.log((1 + len(docs)) / (1 + df)) + 1.0
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class ExtractiveSummary(BaseCompactor):
    """Replace the span between the leading system messages and the last ``keep_last`` messages by its
    extracted sentences."""

    name = "extractive"

    def __init__(self, ratio: float = 0.25, scorer: Literal["tfidf", "recency_tfidf", "constraint_aware"] =
                 "recency_tfidf", dedupe: float = 0.9, *, counter: Any = None):
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0.0 < ratio < 1.0:
            raise ValueError(f"ExtractiveSummary.ratio must be in (0, 1), got {ratio!r}")
        if scorer not in SCORERS:
            raise ValueError(f"ExtractiveSummary.scorer must be one of {SCORERS}, got {scorer!r}")
        if not isinstance(dedupe, (int, float)) or not 0.0 < dedupe <= 1.0:
            raise ValueError(f"ExtractiveSummary.dedupe must be in (0, 1], got {dedupe!r}")
        self.ratio, self.scorer, self.dedupe = float(ratio), scorer, float(dedupe)
        super().__init__(counter, ratio=self.ratio, scorer=scorer, dedupe=self.dedupe)

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        return self._summarise_prefix(messages, keep_last, self._summary)

    def _summary(self, messages: list[Message], lo: int, hi: int) -> tuple[str, dict[str, Any]] | None:
        sents = prefix_sentences(messages, lo, hi)
        if not sents:
            return None
        prefix_tokens = count_tokens(messages[lo:hi], self.counter)
        chosen = self.select(messages, sents, budget=self.ratio * prefix_tokens)
        lines: list[str] = []
        last_msg = None
        for k in chosen:  # original order; one line per source message
            i, s = sents[k]
            if i == last_msg:
                lines[-1] += " " + s
            else:
                lines.append(s)
                last_msg = i
        text = "\n".join(lines)
        return text, {"n_sentences": len(sents), "n_selected": len(chosen),
                      "ratio_achieved": self.counter.count(text) / prefix_tokens if prefix_tokens else 0.0}

    def scores(self, messages: list[Message], sents: list[tuple[int, str]]) -> np.ndarray:
        """Salience of each sentence (see the module docstring), shape (len(sents),)."""
        toks = [word_tokens(normalise(s)) for _, s in sents]
        queries = [word_tokens(normalise(m.content)) for m in messages if is_user_turn(m)][-QUERY_TURNS:]
        rows = tfidf_rows(toks + queries)
        sent_rows, query_rows = rows[:len(toks)], rows[len(toks):]
        if len(query_rows) == 0:
            cos = np.zeros(len(toks))
        else:
            centroid = query_rows.mean(axis=0)
            norm = np.linalg.norm(centroid)
            cos = sent_rows @ centroid / norm if norm > 0 else np.zeros(len(toks))
        if self.scorer == "tfidf":
            return cos
        age = np.array([len(messages) - 1 - i for i, _ in sents], dtype=float)
        return cos * np.exp(-RECENCY_DECAY * age)

    def select(self, messages: list[Message], sents: list[tuple[int, str]], *, budget: float) -> list[int]:
        """Indices into ``sents`` (ascending) of the extracted sentences under a token ``budget``.

        Dedupe and the budget cut walk the ranking together: whether a sentence is a near-duplicate depends only on
        the sentences kept before it, and the cut stops at the first one over budget, so nothing after the cut is
        compared (the full pairwise dedupe was most of a compaction). Kept sentences are grouped by token-set size,
        and a size whose ratio alone bounds the Jaccard below ``dedupe`` is not intersected at all
        (|a & b| / |a | b| <= min / max, and rounding keeps the order)."""
        score = self.scores(messages, sents)
        forced = [self.scorer == "constraint_aware" and is_rule_like(s) for _, s in sents]
        ranking = sorted(range(len(sents)), key=lambda k: (not forced[k], -round(float(score[k]), 12), -k))
        token_sets = [set(word_tokens(normalise(s))) for _, s in sents]
        kept: dict[int, list[set[str]]] = {}  # token sets of the sentences kept by the dedupe, by size
        chosen, used = [], 0.0
        d = self.dedupe
        for k in ranking:  # dedupe along the ranking: the higher-ranked of two near-duplicates stays
            a = token_sets[k]
            na = len(a)
            if any(any(jaccard(a, b) >= d for b in sets) for nb, sets in kept.items()
                   if (na < nb and na / nb >= d) or (nb <= na and (na == 0 or nb / na >= d))):
                continue
            kept.setdefault(na, []).append(a)
            cost = self.counter.count(sents[k][1])
            if not forced[k] and chosen and used + cost > budget:
                break
            chosen.append(k)
            used += cost
        return sorted(chosen)

