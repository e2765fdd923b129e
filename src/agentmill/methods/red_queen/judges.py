"""Judges: anything with a ``judge_id`` and a vectorised ``accept(items) -> bool array``.

``LogisticJudge`` (ReviewWorld's feature judge) lives in ``agentmill.envs.review_world`` and is re-exported here;
:class:`LMJudge` scores rendered documents with a language model's ACCEPT-vs-REJECT log-probability margin — the
only way an LM verdict is read (no free text is parsed).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from agentmill.envs.review_world import LogisticJudge

__all__ = ["Judge", "LogisticJudge", "LMJudge"]


class Judge(Protocol):
    judge_id: str

    def accept(self, docs: Any) -> np.ndarray: ...


class LMJudge:
    """accept iff logp(" ACCEPT") − logp(" REJECT") ≥ ``threshold`` after ``rubric`` + the rendered document.

    ``lm`` is a white-box LM (``encode``, ``forward``, ``fork_cache``): both continuations are scored in one prefill
    per document with ``lm.policy.candidate_logliks``, the rubric prefix kept in a ``PromptCache`` across documents;
    margins are memoised per text, so a judge scores a document once. ``render(docs) -> list[str]`` turns a batch of
    items into texts. No free-text verdict is ever parsed.
    """

    def __init__(self, lm: Any, rubric: str, render: Any, *, judge_id: str = "lm", threshold: float = 0.0) -> None:
        if not hasattr(lm, "fork_cache"):
            raise ValueError(f"LMJudge needs a white-box LM (prompt log-probabilities); {type(lm).__name__} gives "
                             "none: use hf:<model> or scripted:whitebox (an openai: endpoint without prompt logprobs "
                             "cannot judge)")
        self.lm = lm
        self.rubric = rubric
        self.render = render
        self.judge_id = judge_id
        self.threshold = float(threshold)
        self._cache = None
        self._memo: dict[str, float] = {}
        self.items_scored = 0

    def margins(self, texts: Sequence[str]) -> np.ndarray:
        from agentmill.lm.policy import PromptCache, candidate_logliks

        if self._cache is None:
            self._cache = PromptCache()
        cands = [self.lm.encode(" ACCEPT"), self.lm.encode(" REJECT")]
        out = np.empty(len(texts))
        for i, t in enumerate(texts):
            if t not in self._memo:
                ids = self.lm.encode(f"{self.rubric}\n\nPaper:\n{t}\n\nVerdict:")
                ll = candidate_logliks(self.lm, ids, cands, None, prompt_cache=self._cache)
                self._memo[t] = float(ll[0] - ll[1])
                self.items_scored += 1
            out[i] = self._memo[t]
        return out

    def accept(self, docs: Any) -> np.ndarray:
        return self.margins(self.render(docs)) >= self.threshold

    def with_threshold(self, threshold: float, judge_id: str | None = None) -> LMJudge:
        j = LMJudge(self.lm, self.rubric, self.render, judge_id=judge_id or self.judge_id, threshold=threshold)
        j._memo, j._cache = self._memo, self._cache
        return j

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "lm", "judge_id": self.judge_id, "rubric": self.rubric, "threshold": self.threshold}
