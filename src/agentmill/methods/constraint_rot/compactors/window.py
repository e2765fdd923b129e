"""Sliding-window truncation: keep the system messages and the most recent messages that fit.

Real-world analogues: AutoGen ``BufferedChatCompletionContext(buffer_size)`` / ``TokenLimitedChatCompletionContext``
and LangChain ``trim_messages(strategy="last", include_system=True)``. A rule stated in an early turn is evicted
deterministically once the window moves past it — the "AutoGen 100%" mechanism of the paper, arXiv:2606.22528 [I].
"""

from __future__ import annotations

from typing import Any

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import (BaseCompactor, CompactionResult, check_keep_last,
                                                             cut_forward, leading_system)
from agentmill.methods.constraint_rot.messages import message_tokens


class SlidingWindow(BaseCompactor):
    """Keep the leading system messages (``keep_system``) plus the longest recent suffix with at most
    ``max_messages`` non-system messages and at most ``max_tokens`` tokens (either limit may be ``None``).

    The window start only ever moves *later* to a block boundary, so it never opens on a tool result whose call
    was evicted (the budget is a hard limit). ``keep_last`` of :meth:`compact` is validated but the window's own
    limits decide what is kept.
    """

    name = "window"

    def __init__(self, max_messages: int | None = 6, max_tokens: int | None = None, keep_system: bool = True, *,
                 counter: Any = None):
        if max_messages is None and max_tokens is None:
            raise ValueError("SlidingWindow: give max_messages or max_tokens (both are None)")
        for field_, v in (("max_messages", max_messages), ("max_tokens", max_tokens)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"SlidingWindow.{field_} must be an integer >= 1 or None, got {v!r}")
        self.max_messages, self.max_tokens, self.keep_system = max_messages, max_tokens, keep_system
        super().__init__(counter, max_messages=max_messages, max_tokens=max_tokens, keep_system=keep_system)

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        check_keep_last(keep_last)
        head = leading_system(messages) if self.keep_system else 0
        budget = None if self.max_tokens is None else self.max_tokens - sum(
            message_tokens(m, self.counter) for m in messages[:head])
        start, used = len(messages), 0
        while start > head:  # grow the window backwards one message at a time
            cost = message_tokens(messages[start - 1], self.counter)
            if self.max_messages is not None and len(messages) - start + 1 > self.max_messages:
                break
            if budget is not None and used + cost > budget:
                break
            start, used = start - 1, used + cost
        start = cut_forward(messages, start) if start < len(messages) else start
        kept = list(messages[:head]) + list(messages[start:])
        return self._result(messages, kept, summary_text=None, summariser_input=messages,
                            evicted=start - head)
