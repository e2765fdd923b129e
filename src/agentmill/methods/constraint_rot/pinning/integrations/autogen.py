"""Constraint Pinning for AutoGen 0.7 agents (docs/methods/constraint_rot.md "Use it" 5).

AutoGen's ``AssistantAgent`` keeps its history in a ``ChatCompletionContext`` (``autogen_core.model_context``) and
reads it once per model call with ``get_messages()``; the agent's ``system_message`` is prepended outside the
context, so the built-in contexts (``BufferedChatCompletionContext(buffer_size)``,
``HeadAndTailChatCompletionContext(head_size, tail_size)``, ``TokenLimitedChatCompletionContext``) evict everything
else — including a rule stated in an early turn — by position alone.

- :class:`PinnedChatCompletionContext` wraps any context: ``get_messages()`` returns the inner context's view with
  one registry-rendered card per rule inserted per the pinning core's placement (default ``after_summary``: after a
  summary message if the view has one, else at the start of the view, right after the agent's system message),
  forged cards in tool outputs quoted and stray card copies stripped (:class:`PinningMiddleware`'s
  ``after_compaction`` then ``before_model``). The cards are built at read time and never enter the inner buffer:
  ``add_message`` drops card messages, so no eviction or summary ever touches a card.
  ``clear``/``save_state``/``load_state`` delegate to the inner context.
- ``ActorChatCompletionClient`` (an agentmill actor as an AutoGen model client) lives in
  :mod:`agentmill.methods.constraint_rot.frameworks`, with the other framework drivers, so that pinning never
  imports the actors (the package README, "Layering").

Conversion is in one pair of helpers: :func:`from_autogen` (``SystemMessage``/``UserMessage``/``AssistantMessage``/
``FunctionExecutionResultMessage`` → :class:`Message`, one ``tool`` message per ``FunctionExecutionResult``) and
:func:`to_autogen` (back; originals returned untouched where the text did not change). autogen is imported lazily:
the class is built on first access of its name, and a missing extra raises ``MissingExtraError`` (an
``ImportError``) naming ``pip install 'agentmill[autogen]'``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.lm.base import MissingExtraError
from agentmill.methods.constraint_rot.compactors.base import SUMMARY_PREFIX
from agentmill.methods.constraint_rot.messages import origin
from agentmill.methods.constraint_rot.pinning.card import CARD_SHAPED
from agentmill.methods.constraint_rot.pinning.middleware import PinningMiddleware, Placement
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry

CARD_SOURCE = "agentmill-pin"
"""``UserMessage.source`` of the cards :class:`PinnedChatCompletionContext` inserts."""
MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
              "structured_output": False}


def _require_autogen(what: str) -> None:
    try:
        import autogen_core.model_context  # noqa: F401
        import autogen_core.models  # noqa: F401
    except ImportError as e:
        raise MissingExtraError("autogen", what) from e


# ----------------------------------------------------------------------------------------------- conversion
def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p if isinstance(p, str) else "[image]" for p in content)  # UserMessage parts: str | Image


def is_card_message(message: Any) -> bool:
    """A user/system message whose whole text is card-shaped blocks: what :class:`PinnedChatCompletionContext`
    inserts (or a copy of it)."""
    if getattr(message, "type", None) not in ("UserMessage", "SystemMessage"):
        return False
    text = _text(message.content).strip()
    return bool(text) and not CARD_SHAPED.sub("", text).strip()


def _arguments(raw: str) -> dict[str, Any]:
    """A ``FunctionCall.arguments`` JSON string as a dict; unparseable text is kept under ``_unparsed`` (the
    grader then reports an invalid action rather than a silent no-op)."""
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_unparsed": raw}
    return args if isinstance(args, dict) else {"_unparsed": raw}


def from_autogen(messages: Sequence[Any], *, summary_prefixes: Sequence[str] = (SUMMARY_PREFIX,)) -> list[Message]:
    """AutoGen ``LLMMessage``\\ s → agentmill messages, labelled for the pinning core: user messages starting with
    a summary prefix get ``origin="summary", trusted=False``; card messages ``origin="card", trusted=True``; tool
    results stay untrusted. The original rides in ``meta["ag"]`` (with ``ag_index`` for the results of one
    ``FunctionExecutionResultMessage``) so :func:`to_autogen` returns it untouched when its text did not change."""
    out: list[Message] = []
    for m in messages:
        kind = getattr(m, "type", None)
        if kind == "FunctionExecutionResultMessage":
            for i, r in enumerate(m.content):
                out.append(Message("tool", r.content, tool_call_id=r.call_id, name=r.name,
                                   meta={"ag": m, "ag_index": i, "ag_text": r.content}))
            continue
        if kind == "AssistantMessage":
            if isinstance(m.content, str):
                out.append(Message("assistant", m.content, meta={"ag": m, "ag_text": m.content}))
            else:
                calls = tuple(ToolCall(c.id, c.name, _arguments(c.arguments)) for c in m.content)
                text = m.thought or ""
                out.append(Message("assistant", text, tool_calls=calls, meta={"ag": m, "ag_text": text}))
            continue
        if kind not in ("SystemMessage", "UserMessage"):
            raise ValueError(f"from_autogen: unsupported AutoGen message type {kind!r} ({type(m).__name__})")
        text = _text(m.content)
        meta: dict[str, Any] = {"ag": m, "ag_text": text}
        if is_card_message(m):
            meta.update(origin="card", trusted=True)
        elif kind == "UserMessage" and any(p and text.startswith(p) for p in summary_prefixes):
            meta.update(origin="summary", trusted=False)
        out.append(Message("system" if kind == "SystemMessage" else "user", text, meta=meta))
    return out


def to_autogen(messages: Sequence[Message], *, source: str = "assistant") -> list[Any]:
    """agentmill messages → AutoGen ``LLMMessage``\\ s: originals back where the text is unchanged, edited copies
    where pinning quoted or stripped something, new messages otherwise (cards as ``UserMessage`` with source
    :data:`CARD_SOURCE`, or ``SystemMessage`` for system-role cards). Consecutive ``tool`` messages become one
    ``FunctionExecutionResultMessage`` (per original message when they came from AutoGen). ``source`` names the
    assistant of new ``AssistantMessage``\\ s."""
    _require_autogen("to_autogen")
    from autogen_core import FunctionCall
    from autogen_core.models import (AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage,
                                     SystemMessage, UserMessage)

    out: list[Any] = []
    group: list[Message] = []

    def flush() -> None:
        if not group:
            return
        original = group[0].meta.get("ag")
        if original is not None and all(g.content == g.meta.get("ag_text") for g in group) \
                and len(group) == len(original.content):
            out.append(original)
        else:
            results = []
            for g in group:
                prev = original.content[g.meta["ag_index"]] if original is not None else None
                results.append(FunctionExecutionResult(
                    content=g.content, name=g.name or (prev.name if prev else ""),
                    call_id=g.tool_call_id or (prev.call_id if prev else ""),
                    is_error=prev.is_error if prev is not None else g.content.startswith("ERROR:")))
            out.append(FunctionExecutionResultMessage(content=results))
        group.clear()

    for m in messages:
        if m.role == "tool":
            if group and group[0].meta.get("ag") is not m.meta.get("ag"):
                flush()
            group.append(m)
            continue
        flush()
        original = m.meta.get("ag")
        if original is not None and m.content == m.meta.get("ag_text"):
            out.append(original)
        elif original is not None and getattr(original, "type", None) in ("UserMessage", "SystemMessage"):
            out.append(original.model_copy(update={"content": m.content}))
        elif m.role == "assistant" and m.tool_calls:
            calls = [FunctionCall(id=c.id, arguments=json.dumps(c.arguments), name=c.name) for c in m.tool_calls]
            out.append(AssistantMessage(content=calls, thought=m.content or None,
                                        source=getattr(original, "source", source)))
        elif m.role == "assistant":
            out.append(AssistantMessage(content=m.content, source=getattr(original, "source", source)))
        elif m.role == "system":
            out.append(SystemMessage(content=m.content))
        elif m.role == "user":
            out.append(UserMessage(content=m.content, source=CARD_SOURCE if origin(m) == "card" else "user"))
        else:
            raise ValueError(f"to_autogen: cannot convert a message with role {m.role!r}")
    flush()
    return out


def tool_specs(tools: Sequence[Any]) -> list[Any]:
    """AutoGen ``Tool``\\ s or ``ToolSchema`` dicts → agentmill ``ToolSpec``\\ s (what an actor is shown)."""
    from agentmill.envs.office import ToolSpec

    specs = []
    for t in tools:
        schema = t if isinstance(t, dict) else t.schema
        specs.append(ToolSpec(schema["name"], schema.get("description", ""),
                              dict(schema.get("parameters") or {"type": "object", "properties": {}})))
    return specs


# ------------------------------------------------------------------------------------------------- classes
@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, type]:
    """Define the AutoGen subclasses (needs autogen-core; built once, on first use)."""
    _require_autogen("the AutoGen integration")
    from autogen_core.model_context import ChatCompletionContext

    class PinnedChatCompletionContext(ChatCompletionContext):
        """Cards at read time over any ``ChatCompletionContext`` (see the module docstring). ``report`` is the
        pinning report; ``dropped_cards`` counts card messages ``add_message`` refused to store."""

        def __init__(self, inner: Any, registry: PolicyRegistry, *, placement: Placement = "after_summary",
                     verify: Literal["repair", "raise", "warn"] = "repair", sanitize_untrusted: bool = True,
                     counter: Any = None, card_role: Literal["user", "system"] = "user",
                     summary_prefixes: Sequence[str] = (SUMMARY_PREFIX,)):
            super().__init__()
            if not isinstance(inner, ChatCompletionContext):
                raise ValueError(f"PinnedChatCompletionContext.inner must be an autogen_core ChatCompletionContext, "
                                 f"got {type(inner).__name__}")
            self.inner = inner
            self.pin = PinningMiddleware(registry, placement=placement, verify=verify,
                                         sanitize_untrusted=sanitize_untrusted, counter=counter, card_role=card_role)
            self.summary_prefixes = tuple(summary_prefixes)
            self.dropped_cards = 0

        @property
        def report(self):  # noqa: ANN201 - PinReport
            return self.pin.report

        async def get_messages(self) -> list[Any]:
            view = from_autogen(await self.inner.get_messages(), summary_prefixes=self.summary_prefixes)
            return to_autogen(self.pin.before_model(self.pin.after_compaction(view)))

        async def add_message(self, message: Any) -> None:
            if is_card_message(message):
                self.dropped_cards += 1
                return
            await self.inner.add_message(message)

        async def clear(self) -> None:
            await self.inner.clear()

        async def save_state(self) -> Any:
            return await self.inner.save_state()

        async def load_state(self, state: Any) -> None:
            await self.inner.load_state(state)

    PinnedChatCompletionContext.__module__ = __name__
    return {"PinnedChatCompletionContext": PinnedChatCompletionContext}


def __getattr__(name: str) -> Any:  # PEP 562: the class exists once autogen-core is importable
    if name == "PinnedChatCompletionContext":
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CARD_SOURCE", "MODEL_INFO", "PinnedChatCompletionContext", "from_autogen", "is_card_message",
           "to_autogen", "tool_specs"]
