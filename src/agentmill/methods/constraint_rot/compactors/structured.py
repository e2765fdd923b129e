"""Structured summary: a fixed template whose CONSTRAINTS section lists every rule-like sentence verbatim.

The template is {goal, done, pending, files, decisions, constraints} (docs/methods/constraint_rot.md "Use it" 3), the
shape of the structured compaction prompts users ask for (langchain-ai/deepagents #2389). The ``rules`` filler is
deterministic: a sentence with a modality cue (``messages.MODALITY_CUES``) goes to CONSTRAINTS, so this is the
constraint-aware baseline — it keeps the rule whenever the rule's sentence carries a cue. The ``lm`` filler (an LM
writes the sections) comes with the LLM summariser and is not implemented here.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import (BaseCompactor, CompactionResult, is_user_turn,
                                                             prefix_sentences)
from agentmill.methods.constraint_rot.messages import is_rule_like, normalise, split_sentences

PENDING_CUES = ("next", "then", "pending", "todo", "to do", "later", "remaining", "still need", "follow up",
                "not yet", "after that")
PATH_ARGS = ("path", "src", "dst", "doc", "db")


def _call_line(name: str, args: dict[str, Any]) -> str:
    parts = []
    for k, v in args.items():
        s = v if isinstance(v, str) else json.dumps(v)
        parts.append(f"{k}={s[:40]}")
    return f"{name}({', '.join(parts)})"


class StructuredSummary(BaseCompactor):
    """Summarise everything between the leading system messages and the last ``keep_last`` messages into the
    template; the summary message replaces that span."""

    name = "structured"

    def __init__(self, filler: Literal["rules", "lm"] = "rules", lm: Any = None, *, counter: Any = None):
        if filler not in ("rules", "lm"):
            raise ValueError(f"StructuredSummary.filler must be 'rules' or 'lm', got {filler!r}")
        if filler == "lm":
            if lm is None:
                raise ValueError("StructuredSummary(filler='lm') needs lm=")
            raise NotImplementedError("StructuredSummary(filler='lm') comes with the LLM summariser (llm_summary.py)")
        self.filler = filler
        super().__init__(counter, filler=filler)

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        return self._summarise_prefix(messages, keep_last, lambda msgs, lo, hi: (self.fill(msgs[lo:hi]), {}))

    def fill(self, prefix: list[Message]) -> str:
        """The deterministic template text for the summarised span."""
        sentences = prefix_sentences(prefix, 0, len(prefix))
        users = [i for i, m in enumerate(prefix) if is_user_turn(m)]
        goal = split_sentences(prefix[users[0]].content)[:1] if users else []
        done = [_call_line(c.name, c.arguments) for m in prefix for c in m.tool_calls]
        pending: list[str] = []
        last_call = max((i for i, m in enumerate(prefix) if m.tool_calls), default=-1)
        if users and users[-1] > last_call:  # the last request has not been acted on yet
            pending += split_sentences(prefix[users[-1]].content)
        for i, s in sentences:
            if prefix[i].role != "tool" and any(f" {c} " in f" {normalise(s)} " for c in PENDING_CUES):
                pending.append(s)
        files = sorted({str(c.arguments[a]) for m in prefix for c in m.tool_calls for a in PATH_ARGS
                        if a in c.arguments})
        decisions = [s for i, s in sentences if prefix[i].role == "assistant" and not prefix[i].tool_calls][-3:]
        constraints = [s for _, s in sentences if is_rule_like(s)]
        sections = {"GOAL": goal, "DONE": done, "PENDING": pending, "FILES": files, "DECISIONS": decisions,
                    "CONSTRAINTS": constraints}
        lines = []
        for head, items in sections.items():
            lines.append(f"{head}:")
            lines += [f"- {s}" for s in _dedupe(items)] or ["- none"]
        return "\n".join(lines)


def _dedupe(items: list[str]) -> list[str]:
    seen, out = set(), []
    for s in items:
        k = normalise(s)
        if k not in seen:
            seen.add(k)
            out.append(s)
    return out
