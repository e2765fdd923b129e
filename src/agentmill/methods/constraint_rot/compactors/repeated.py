"""Repeated compaction: apply a compactor k times (long sessions compact again and again, docs/methods/constraint_rot.md
"Use it" 3).

Each round compacts the previous round's output, so an earlier summary is itself summarised (the ``running``
behaviour for the deterministic summarisers: the prior summary sits in the summarised span). The rounds(M, k)
*condition*, with fresh distractor work between rounds, is run by the agent loop; this wrapper is the
back-to-back variant.
"""

from __future__ import annotations

from dataclasses import replace

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import (CompactionResult, Compactor, check_keep_last,
                                                             make_config_hash)

MAX_ROUNDS = 5


class Repeated:
    """``inner`` applied ``rounds`` times (1..5); the result reports the first round's input and the last
    round's output, with per-round token counts in ``details["rounds"]``."""

    def __init__(self, inner: Compactor, rounds: int):
        if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
            raise ValueError(f"Repeated.rounds must be an integer in 1..{MAX_ROUNDS}, got {rounds!r}")
        self.inner, self.rounds = inner, rounds
        self.name = f"repeated({inner.name})"
        self.label = f"repeated({getattr(inner, 'label', inner.name)})"
        self.lm_spec: str | None = getattr(inner, "lm_spec", None)  # the summariser LM, when inner has one
        self.config_hash = make_config_hash("repeated", inner=inner.config_hash, rounds=rounds)

    def __repr__(self) -> str:
        return f"Repeated({self.inner!r}, rounds={self.rounds})"

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        check_keep_last(keep_last)
        results = []
        current = list(messages)
        for _ in range(self.rounds):
            res = self.inner.compact(current, keep_last=keep_last)
            results.append(res)
            current = res.messages
        first, last = results[0], results[-1]
        summary = next((r.summary_text for r in reversed(results) if r.summary_text is not None), None)
        return replace(last, summary_text=summary, summariser_input_hash=first.summariser_input_hash,
                       summariser_input=first.summariser_input, tokens_before=first.tokens_before,
                       config_hash=self.config_hash, name=self.name,
                       details={"rounds": [(r.tokens_before, r.tokens_after) for r in results],
                                "round_summaries": [r.summary_text for r in results],
                                # a failed round is a failed compaction (the package README, "Faults"), not a shorter
                                # one
                                "summary_failed": any(bool(r.details.get("summary_failed")) for r in results)})
