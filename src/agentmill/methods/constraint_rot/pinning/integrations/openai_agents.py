"""Constraint Pinning for the OpenAI Agents SDK (0.24): session wrappers (docs/methods/constraint_rot.md "Use it" 5).

The SDK's ``Runner`` reads a session's history once per run (``get_items``), sends it with the new input, and
writes the new turn back (``add_items``). Both wrappers implement the SDK's structural ``Session`` protocol
(``session_id``, ``session_settings``, ``get_items(limit)``, ``add_items(items)``, ``pop_item()``,
``clear_session()``), so they need no SDK import and compose over any session:

    PinnedSession(CompactingSession(SQLiteSession("s1"), compactor, trigger_tokens=2000, token_counter=...),
                  registry)

- :class:`PinnedSession`: ``get_items`` returns the inner items with one card per registered rule inserted at the
  start of the post-summary segment (after the last summary item, else after the leading system/developer items),
  forged cards in tool outputs quoted and stray card copies stripped — the pinning core's ``after_compaction`` and
  ``before_model``. ``add_items`` drops card items, so the runner never persists a card and no compactor ever
  summarises one.
  Pass ``RunConfig(call_model_input_filter=session.model_input_filter)`` to pin the follow-up model calls inside
  a run as well (their input is the run's memory, not the session).
- :class:`CompactingSession`: after ``add_items`` it runs any agentmill :class:`Compactor` over the stored history
  once it exceeds ``trigger_tokens`` and replaces the stored items with the result, so tests and tiny models need
  no server-side ``responses.compact``. A summary is stored as a user item starting with the compactors'
  ``SUMMARY_PREFIX``, which :class:`PinnedSession` recognises. Over ``OpenAIResponsesCompactionSession`` the
  summary items are opaque and pinning guarantees presence only.

A compaction inside ``add_items`` is seen by the model from the *next* ``Runner.run`` on: within one run the SDK
keeps the turn's input in memory. Items are the SDK's JSON input items (dicts); ``function_call`` items of one
assistant turn become one agentmill message with several tool calls, so a compactor never separates a call from
its output.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.lm.base import MissingExtraError
from agentmill.methods.constraint_rot.compactors.base import SUMMARY_PREFIX, CompactionResult, Compactor
from agentmill.methods.constraint_rot.messages import as_counter, count_tokens, origin
from agentmill.methods.constraint_rot.pinning.card import CARD_SHAPED
from agentmill.methods.constraint_rot.pinning.middleware import PinningMiddleware, PinReport
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry

ROLES = ("user", "system", "developer")


# ----------------------------------------------------------------------------------------------- conversion
def _item_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)  # a pydantic output item handed over unconverted
    if dump is None:
        raise ValueError(f"session item must be a dict or a pydantic model, got {type(item).__name__}")
    return dump(exclude_unset=True)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def is_card_item(item: Any) -> bool:
    """A message item whose whole text is card-shaped blocks: what :class:`PinnedSession` inserts."""
    d = _item_dict(item)
    if d.get("type", "message") != "message" or d.get("role") not in ROLES:
        return False
    text = _content_text(d.get("content")).strip()
    return bool(text) and not CARD_SHAPED.sub("", text).strip()


def items_to_messages(items: Sequence[Any]) -> list[Message]:
    """SDK input items → agentmill messages (originals kept in ``meta["sdk_items"]``). Summaries (user items that
    start with ``SUMMARY_PREFIX``) are labelled ``origin="summary", trusted=False``; card items ``origin="card"``;
    items of other types (reasoning, hosted tools) become empty assistant messages that carry them through."""
    out: list[Message] = []
    for raw in items:
        d = _item_dict(raw)
        kind = d.get("type", "message")
        if kind == "function_call":
            call = ToolCall(d.get("call_id", ""), d["name"], json.loads(d.get("arguments") or "{}"))
            prev = out[-1] if out else None
            if prev is not None and prev.meta.get("sdk_kind") == "function_call":  # one assistant turn
                out[-1] = Message("assistant", "", tool_calls=prev.tool_calls + (call,),
                                  meta={**prev.meta, "sdk_items": [*prev.meta["sdk_items"], raw]})
            else:
                out.append(Message("assistant", "", tool_calls=(call,),
                                   meta={"sdk_kind": "function_call", "sdk_items": [raw], "sdk_text": ""}))
        elif kind == "function_call_output":
            output = d.get("output")
            text = output if isinstance(output, str) else _content_text(output) or json.dumps(output)
            out.append(Message("tool", text, tool_call_id=d.get("call_id"),
                               meta={"sdk_kind": kind, "sdk_items": [raw], "sdk_text": text}))
        elif kind == "message":
            role = d.get("role")
            text = _content_text(d.get("content"))
            meta: dict[str, Any] = {"sdk_kind": kind, "sdk_items": [raw], "sdk_text": text}
            if role == "user" and text.startswith(SUMMARY_PREFIX):
                meta.update(origin="summary", trusted=False)
            elif is_card_item(d):
                meta.update(origin="card", trusted=True)
            out.append(Message("system" if role in ("system", "developer") else role, text, meta=meta))
        else:
            out.append(Message("assistant", "", meta={"sdk_kind": kind, "sdk_items": [raw], "sdk_text": ""}))
    return out


def messages_to_items(messages: Sequence[Message], *, card_role: str = "user") -> list[Any]:
    """agentmill messages → SDK input items: the original items where the text is unchanged, an edited copy
    where pinning quoted or stripped something, new ``{"role", "content"}`` items for cards and summaries."""
    out: list[Any] = []
    for m in messages:
        originals = m.meta.get("sdk_items")
        if originals is not None and m.content == m.meta.get("sdk_text"):
            out.extend(originals)
        elif originals is not None and m.meta.get("sdk_kind") == "function_call_output":
            out.append({**_item_dict(originals[0]), "output": m.content})
        elif originals is not None and m.meta.get("sdk_kind") == "message":
            d = _item_dict(originals[0])
            out.append({"role": d["role"], "content": m.content})
        elif originals is None and origin(m) == "card":
            out.append({"role": card_role, "content": m.content})
        elif originals is None and m.role == "assistant" and m.tool_calls:
            # an agentmill assistant turn with tool calls (e.g. a compactor's replayed history): its text, if any,
            # then one SDK function_call item per call, as the SDK itself records a turn
            if m.content:
                out.append({"role": "assistant", "content": m.content})
            out.extend({"type": "function_call", "call_id": tc.id, "name": tc.name,
                        "arguments": json.dumps(tc.arguments)} for tc in m.tool_calls)
        elif originals is None and m.role == "tool" and m.tool_call_id:
            out.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content})
        elif originals is None and m.role in ("user", "system", "assistant"):
            out.append({"role": m.role, "content": m.content})
        else:
            raise ValueError(f"messages_to_items: cannot rebuild an SDK item from {m!r}")
    return out


# ------------------------------------------------------------------------------------------------- sessions
class PinnedSession:
    """Cards at read time, never persisted (see the module docstring). ``report`` is the pinning report."""

    def __init__(self, inner: Any, registry: PolicyRegistry, *, role: Literal["user", "system", "developer"] = "user",
                 verify: Literal["repair", "raise", "warn"] = "repair", sanitize_untrusted: bool = True,
                 counter: Any = None):
        if role not in ROLES:
            raise ValueError(f"PinnedSession.role must be one of {ROLES}, got {role!r}")
        for method in ("get_items", "add_items", "pop_item", "clear_session"):
            if not callable(getattr(inner, method, None)):
                raise ValueError(f"PinnedSession: inner session {type(inner).__name__} has no {method}()")
        self.inner, self.role = inner, role
        self.session_id = inner.session_id
        self.pin = PinningMiddleware(registry, placement="after_summary", verify=verify,
                                     sanitize_untrusted=sanitize_untrusted, counter=counter,
                                     card_role="user" if role == "user" else "system")
        self.dropped_cards = 0

    @property
    def session_settings(self) -> Any:
        return getattr(self.inner, "session_settings", None)

    @property
    def report(self) -> PinReport:
        return self.pin.report

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = await self.inner.get_items(limit)
        pinned = self.pin.before_model(self.pin.after_compaction(items_to_messages(items)))
        return messages_to_items(pinned, card_role=self.role)

    def model_input_filter(self, data: Any) -> Any:
        """A ``RunConfig(call_model_input_filter=...)``: pins every model call of a run, including the calls that
        follow a tool call *within* the run (their input never passes through the session, so without this filter
        a forged card in a fresh tool output reaches the model unquoted until the next run)."""
        try:
            from agents.run_config import ModelInputData
        except ImportError as e:
            raise MissingExtraError("openai-agents", "PinnedSession.model_input_filter") from e
        md = data.model_data
        pinned = self.pin.before_model(self.pin.after_compaction(items_to_messages(md.input)))
        return ModelInputData(input=messages_to_items(pinned, card_role=self.role), instructions=md.instructions)

    async def add_items(self, items: list[Any]) -> None:
        keep = [it for it in items if not is_card_item(it)]
        self.dropped_cards += len(items) - len(keep)
        if keep:
            await self.inner.add_items(keep)

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


class CompactingSession:
    """Runs ``compactor`` over the stored history after ``add_items`` once it holds more than ``trigger_tokens``
    tokens (``token_counter``: a counter, a tokenizer or ``f(text) -> int``). ``results`` keeps every
    :class:`CompactionResult`, in order."""

    def __init__(self, inner: Any, compactor: Compactor, *, trigger_tokens: int, token_counter: Any,
                 keep_last: int = 4):
        if isinstance(trigger_tokens, bool) or not isinstance(trigger_tokens, int) or trigger_tokens < 1:
            raise ValueError(f"CompactingSession.trigger_tokens must be an integer >= 1, got {trigger_tokens!r}")
        if not callable(getattr(compactor, "compact", None)):
            raise ValueError(f"CompactingSession.compactor must have compact(messages, keep_last=...), "
                             f"got {type(compactor).__name__}")
        self.inner, self.compactor, self.trigger_tokens, self.keep_last = inner, compactor, trigger_tokens, keep_last
        self.counter = as_counter(token_counter)
        self.session_id = inner.session_id
        self.results: list[CompactionResult] = []

    @property
    def session_settings(self) -> Any:
        return getattr(self.inner, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        await self.inner.add_items(items)
        history = items_to_messages(await self.inner.get_items())
        if count_tokens(history, self.counter) <= self.trigger_tokens:
            return
        result = self.compactor.compact(history, keep_last=self.keep_last)
        self.results.append(result)
        await self.inner.clear_session()
        await self.inner.add_items(messages_to_items(result.messages))

    async def pop_item(self) -> Any:
        return await self.inner.pop_item()

    async def clear_session(self) -> None:
        await self.inner.clear_session()


__all__ = ["CompactingSession", "PinnedSession", "is_card_item", "items_to_messages", "messages_to_items"]
