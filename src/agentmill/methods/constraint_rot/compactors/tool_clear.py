"""Tool-result clearing: replace all but the most recent tool outputs by a placeholder.

Analogue: Anthropic's "clear tool uses" context editing. The messages (and so every call/result pair) stay in
place; only the content of older tool outputs goes. A rule delivered as a tool output (``memory_tool``,
``policy_doc_tool`` locations) is erased by it; a rule in a user turn is untouched.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import BaseCompactor, CompactionResult, check_keep_last

CLEARED = "[tool output cleared]"


class ToolResultClearing(BaseCompactor):
    """Clear the content of every tool message except the last ``keep_last`` (constructor value; the
    ``keep_last`` of :meth:`compact` is validated only)."""

    name = "tool_clear"

    def __init__(self, keep_last: int = 2, *, counter: Any = None):
        self.keep_last = check_keep_last(keep_last, "ToolResultClearing.keep_last")
        super().__init__(counter, keep_last=keep_last)

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        check_keep_last(keep_last)
        tool_idx = [i for i, m in enumerate(messages) if m.role == "tool"]
        clear = set(tool_idx[:-self.keep_last]) if len(tool_idx) > self.keep_last else set()
        out = [replace(m, content=CLEARED, meta={**m.meta, "cleared": True}) if i in clear else m
               for i, m in enumerate(messages)]
        return self._result(messages, out, summary_text=None, summariser_input=messages, cleared=len(clear))
