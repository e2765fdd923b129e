"""LM roles as critics: a yes/no reviewer (L3) over ``LM.logprobs``, and the diff's mean token log-probability
(the token-probability confidence baseline). Both return a float score; ``envs.pyrepo.ScoreCritic(name, score_fn)``
turns a score into a pass/fail critic with a threshold.

Any ``agentmill.lm`` model works: ``hf:smollm2`` locally, an ``openai:`` endpoint that serves ``/v1/completions``
with ``echo`` (``OPENAI_API_KEY``), or a ``replay:`` recording. ``agentmill serve`` answers 400 to logprob requests, so
it cannot score. Without a model the caller records "precondition not met: no endpoint".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

REVIEW_PROMPT = ("You review a patch for a Python bug.\nIssue:\n{issue}\n\nPatch:\n{diff}\n\n"
                 "Does this patch fix the issue without breaking anything? Answer yes or no.\nAnswer:")
"""The reviewer's prompt [R]; the authors' L3 prompt is not reproduced here."""


def yes_probability(lm: Any, prompt: str) -> float:
    """P(" yes") / (P(" yes") + P(" no")) for the next token(s) after ``prompt`` (log-probabilities summed over each
    answer's tokens)."""
    ly = float(sum(lm.logprobs(prompt, " yes")))
    ln = float(sum(lm.logprobs(prompt, " no")))
    m = max(ly, ln)
    return math.exp(ly - m) / (math.exp(ly - m) + math.exp(ln - m))


def review_scorer(lm: Any, *, max_chars: int = 6000) -> Callable[[Any, Any], float]:
    """``score_fn(task, candidate) -> P(yes)`` for ``ScoreCritic``: the task's ``issue`` and the candidate's ``diff``
    (cut to ``max_chars`` each, with a note)."""

    def score(task: Any, cand: Any) -> float:
        issue, diff = str(getattr(task, "issue", "")), str(getattr(cand, "diff", ""))
        if len(issue) > max_chars:
            issue = issue[:max_chars] + "\n[... issue truncated]"
        if len(diff) > max_chars:
            diff = diff[:max_chars] + "\n[... diff truncated]"
        return yes_probability(lm, REVIEW_PROMPT.format(issue=issue, diff=diff or "(empty patch)"))

    return score


def diff_logprob_scorer(lm: Any, *, max_chars: int = 6000) -> Callable[[Any, Any], float]:
    """The token-probability baseline: the mean log-probability per token of the candidate's diff given the issue."""

    def score(task: Any, cand: Any) -> float:
        diff = str(getattr(cand, "diff", ""))[:max_chars] or "(empty patch)"
        lp = lm.logprobs(f"Issue:\n{str(getattr(task, 'issue', ''))[:max_chars]}\n\nPatch:\n", diff)
        return float(sum(lp) / max(len(lp), 1))

    return score
