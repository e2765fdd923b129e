"""The compactor interface (docs/methods/constraint_rot.md "Use it" 3) and the cut rules every compactor shares.

A compactor turns a context into a shorter one. Two invariants hold for all of them:

- **Cuts never separate an assistant tool call from its tool results** (the rule LangChain's
  ``SummarizationMiddleware`` applies): a context is a sequence of *blocks* — an assistant message with tool calls
  together with the tool messages that follow it, or any other single message — and cuts fall between blocks.
- **Leading system messages are kept verbatim**: frameworks hold the system prompt outside the compacted history,
  which is why a rule placed there survives (the `system` control location, NC-6).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.messages import TokenCounter, as_counter, count_tokens, origin, split_sentences

SUMMARY_PREFIX = "Summary of the earlier conversation:"
HANDOFF_PREFACE = ("An earlier model worked on this task before you; the earlier messages were removed and its "
                   "handoff note follows. Build on it and on the messages after it.")
"""How a ``handoff``-style summary is introduced (a checkpoint note for the next model)."""
CONTINUATION_PREFACE = ("This session continues an earlier conversation that no longer fits in the context. "
                        "Summary of the earlier part:")
"""How a ``sectioned``-style summary is introduced (a continuation preface)."""


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction produced.

    ``summariser_input_hash`` is the sha256 of the messages the summariser (or eviction rule) actually received —
    the content address of the summary cache. ``saw_rule_in_input`` is ``None`` unless the caller, who knows the
    rule, fills it in (``dataclasses.replace``). ``details`` holds compactor-specific facts (e.g. per-round token
    counts of ``Repeated``, the achieved ratio of ``ExtractiveSummary``).
    """

    messages: list[Message]
    summary_text: str | None
    summariser_input_hash: str
    saw_rule_in_input: bool | None
    tokens_before: int
    tokens_after: int
    config_hash: str
    name: str = ""
    summariser_input: tuple[Message, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Compactor(Protocol):
    name: str
    config_hash: str

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult: ...


def make_config_hash(name: str, **config: Any) -> str:
    """16 hex of sha256 over the compactor's name and configuration (sorted JSON)."""
    blob = json.dumps({"name": name, **config}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def messages_hash(messages: Sequence[Message]) -> str:
    """sha256 of what a model would read of ``messages`` (``to_dict``: harness labels excluded)."""
    blob = json.dumps([m.to_dict() for m in messages], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def check_keep_last(keep_last: int, what: str = "keep_last") -> int:
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {keep_last!r}")
    return keep_last


# ---------------------------------------------------------------------------------------------------- blocks
def block_starts(messages: Sequence[Message]) -> list[int]:
    """Indices where a cut may fall: every index except a tool message that continues a block.

    A tool message continues the block of the nearest preceding assistant message with tool calls when only tool
    messages lie between them; an orphan tool message (no such assistant) starts its own block. ``len(messages)``
    is always a valid cut too, but it is not listed.
    """
    starts = []
    in_call_block = False
    for i, m in enumerate(messages):
        if m.role == "tool" and in_call_block:
            continue
        starts.append(i)
        in_call_block = m.role == "assistant" and bool(m.tool_calls)
    return starts


def cut_back(messages: Sequence[Message], idx: int) -> int:
    """The largest valid cut ≤ idx (moving earlier keeps more of the tail)."""
    if idx >= len(messages):
        return len(messages)
    return max((s for s in block_starts(messages) if s <= idx), default=0)


def cut_forward(messages: Sequence[Message], idx: int) -> int:
    """The smallest valid cut ≥ idx (moving later drops an orphaned tool result)."""
    return min((s for s in block_starts(messages) if s >= idx), default=len(messages))


def leading_system(messages: Sequence[Message]) -> int:
    """Number of system messages at the start of the context."""
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return n


def split_prefix_tail(messages: Sequence[Message], keep_last: int) -> tuple[int, int]:
    """(end of the leading system messages, start of the kept tail) for summarising compactors.

    The tail is the last ``keep_last`` messages, extended backwards so it never starts inside a tool-call block.
    """
    sys_end = leading_system(messages)
    tail = max(sys_end, cut_back(messages, max(sys_end, len(messages) - keep_last)))
    return sys_end, tail


def summary_message(text: str, *, step: int | None = None) -> Message:
    """The summary as the harnesses insert it: a user-role message with an announcing prefix.

    Labelled ``trusted=False`` because its content is derived from untrusted tool outputs (a summariser may copy
    a forged card or an injected instruction into it)."""
    meta: dict[str, Any] = {"origin": "summary", "trusted": False}
    if step is not None:
        meta["step"] = step
    return Message(role="user", content=f"{SUMMARY_PREFIX}\n{text}", meta=meta)


def last_step(messages: Sequence[Message]) -> int | None:
    steps = [m.meta["step"] for m in messages if isinstance(m.meta.get("step"), int)]
    return max(steps) if steps else None


_BULLET = re.compile(r"^[-*\u2022]+\s*")


def prefix_sentences(messages: Sequence[Message], lo: int, hi: int) -> list[tuple[int, str]]:
    """(message index, sentence) for the contents of messages[lo:hi], in order; list bullets and the summary
    prefix and preface sentences are removed so that a re-summarised summary does not accumulate them."""
    harness = {s.strip() for p in (SUMMARY_PREFIX, HANDOFF_PREFACE, CONTINUATION_PREFACE) for s in split_sentences(p)}
    out = []
    for i in range(lo, hi):
        for s in split_sentences(messages[i].content):
            s = _BULLET.sub("", s).strip()
            if s and s not in harness:
                out.append((i, s))
    return out


def is_user_turn(m: Message) -> bool:
    """A user message written by the user, not a harness-made summary, placeholder or card."""
    return m.role == "user" and origin(m) not in ("summary", "card")


class BaseCompactor:
    """Shared bookkeeping: a token counter and the construction of a :class:`CompactionResult`."""

    name = "base"

    def __init__(self, counter: Any = None, **config: Any):
        self.counter: TokenCounter = as_counter(counter)
        self.config = config
        self.config_hash = make_config_hash(self.name, **config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{type(self).__name__}({args})"

    def _result(self, before: Sequence[Message], after: list[Message], *, summary_text: str | None,
                summariser_input: Sequence[Message], **details: Any) -> CompactionResult:
        return CompactionResult(messages=after, summary_text=summary_text,
                                summariser_input_hash=messages_hash(summariser_input), saw_rule_in_input=None,
                                tokens_before=count_tokens(before, self.counter),
                                tokens_after=count_tokens(after, self.counter), config_hash=self.config_hash,
                                name=self.name, summariser_input=tuple(summariser_input), details=details)


    def _summarise_prefix(self, messages: list[Message], keep_last: int,
                          summarise: Callable[[list[Message], int, int], tuple[str, dict[str, Any]] | None]
                          ) -> CompactionResult:
        """The summarisers' common frame: keep the leading system messages and the last ``keep_last`` messages,
        replace the span between by one summary message. ``summarise(messages, lo, hi)`` writes the summary of
        ``messages[lo:hi]`` (it may read the whole context, e.g. for recency) and returns (text, details), or
        ``None`` to leave the context unchanged."""
        check_keep_last(keep_last)
        sys_end, tail = split_prefix_tail(messages, keep_last)
        prefix = messages[sys_end:tail]
        made = summarise(messages, sys_end, tail) if prefix else None
        if made is None:
            return self._result(messages, list(messages), summary_text=None, summariser_input=prefix)
        text, details = made
        out = list(messages[:sys_end]) + [summary_message(text, step=last_step(prefix))] + list(messages[tail:])
        return self._result(messages, out, summary_text=text, summariser_input=prefix, **details)


class NoCompaction(BaseCompactor):
    """Identity: the control condition."""

    name = "none"

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        check_keep_last(keep_last)
        return self._result(messages, list(messages), summary_text=None, summariser_input=messages)
