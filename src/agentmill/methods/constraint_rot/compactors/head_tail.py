"""Head and tail: keep the first ``head`` and the last ``tail`` messages, drop the middle.

Analogue: AutoGen ``HeadAndTailChatCompletionContext(head_size, tail_size)``, which also drops a tool call at the
end of the head and a tool result at the start of the tail rather than split them, and puts a "Skipped N
messages." placeholder between. It is the positive control of the benchmark: a rule in the head survives.
"""

from __future__ import annotations

from typing import Any

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import (BaseCompactor, CompactionResult, check_keep_last,
                                                             cut_back, cut_forward, last_step)

PLACEHOLDER = "[{n} earlier messages omitted]"


class HeadAndTail(BaseCompactor):
    """Keep messages[:head] and messages[-tail:], both shrunk (never grown) to block boundaries, with a
    placeholder message (``origin="summary"``, so pinning's ``after_summary`` placement finds the cut) between.
    Counts include system messages, as AutoGen's do. ``keep_last`` of :meth:`compact` is validated only."""

    name = "head_tail"

    def __init__(self, head: int = 2, tail: int = 4, *, counter: Any = None):
        for field_, v in (("head", head), ("tail", tail)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"HeadAndTail.{field_} must be an integer >= 0, got {v!r}")
        if head + tail < 1:
            raise ValueError(f"HeadAndTail: head + tail must be >= 1, got head={head}, tail={tail}")
        self.head, self.tail = head, tail
        super().__init__(counter, head=head, tail=tail)

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        check_keep_last(keep_last)
        n = len(messages)
        if self.head + self.tail >= n:
            return self._result(messages, list(messages), summary_text=None, summariser_input=messages, skipped=0)
        head_end = cut_back(messages, self.head)
        tail_start = cut_forward(messages, n - self.tail)
        skipped = tail_start - head_end
        text = PLACEHOLDER.format(n=skipped)
        marker = Message(role="user", content=text,
                         meta={"origin": "summary", "trusted": True, "step": last_step(messages[:tail_start])})
        kept = list(messages[:head_end]) + [marker] + list(messages[tail_start:])
        return self._result(messages, kept, summary_text=text, summariser_input=messages, skipped=skipped)
