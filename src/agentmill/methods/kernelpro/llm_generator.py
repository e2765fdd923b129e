"""The LLM generator: prompt assembly (task, the node's source, the Stage-1 report, the rendered findings or raw
metrics or nothing, the last search-memory notes, the last compile error or wall verdict), code-block extraction,
and the call through any ``LM`` (an ``openai:`` endpoint wrapped in ``lm.replay.RecordReplayLM`` so every reply is
recorded before it is compiled, and a replay run makes 0 requests)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmill.methods.kernelpro.tasks import Task

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def fenced_code(text: str, langs: Sequence[str] = ("c", "C", "")) -> str | None:
    """The first fenced code block whose language tag is in ``langs`` (a few lines copied in spirit from
    AutoCog's prompt helpers, as ARCHITECTURE.md allows); None when the reply has no code block."""
    for m in FENCE.finditer(text):
        if m.group(1) in langs or not langs:
            return m.group(2)
    return None


def build_prompt(task: Task, source: str, feedback: str, memory: Sequence[dict[str, Any]], last_error: str = "",
                 *, shape: Sequence[int] = ()) -> str:
    """The user prompt for one proposal."""
    notes = "\n".join(f"- {m.get('lesson', '')} (speedup {m.get('speedup', float('nan')):.2f})"
                      for m in list(memory)[-20:])
    parts = [f"Optimise this C kernel for task `{task.name}` (fp32; no library calls; reassociation "
             f"{'allowed' if task.reassoc else 'not allowed'}). Signature: `{task.signature};`. "
             f"Timed size: {tuple(shape)}.",
             "Current kernel:\n```c\n" + source.strip() + "\n```"]
    if feedback:
        parts.append("Profiler feedback:\n" + feedback)
    if notes:
        parts.append("Search memory (most recent last):\n" + notes)
    if last_error:
        parts.append("Your previous attempt failed:\n" + last_error[:2048])
    parts.append("Reply with exactly one ```c fenced block holding the complete new kernel.")
    return "\n\n".join(parts)


@dataclass
class LLMGenerator:
    """Proposes a new C source from a node. ``feedback`` is the ablation arm: diagnoses | raw | none | both."""

    lm: Any
    feedback: str = "diagnoses"
    memory_notes: int = 20
    max_new_tokens: int = 1024
    calls: list[dict[str, Any]] = field(default_factory=list)

    def propose(self, task: Task, source: str, feedback_text: str, memory: Sequence[dict[str, Any]],
                last_error: str = "", shape: Sequence[int] = ()) -> tuple[str | None, str]:
        """(new source or None when the reply has no code block, the raw reply)."""
        from agentmill.lm.base import GenerateConfig

        prompt = build_prompt(task, source, feedback_text if self.feedback != "none" else "",
                              list(memory)[-self.memory_notes:], last_error, shape=shape)
        reply = self.lm.generate([prompt], GenerateConfig(max_new_tokens=self.max_new_tokens, temperature=0.0))[0].text
        self.calls.append({"prompt_chars": len(prompt), "reply_chars": len(reply)})
        return fenced_code(reply), reply
