"""Constraint Pinning for LangChain 1.x agents and LangGraph prebuilt agents (docs/methods/constraint_rot.md "Use it"
5).

- :class:`ConstraintPinningMiddleware` — an ``AgentMiddleware`` for ``langchain.agents.create_agent``.
  ``mode="ephemeral"`` (default) pins at request time in ``wrap_model_call``/``awrap_model_call``: card-shaped
  blocks are stripped from the request, one fresh card per registered rule is inserted after the summary message
  that LangChain's ``SummarizationMiddleware`` writes (or at the start of the non-system messages), the result is
  verified, and the handler is called with ``request.override(messages=...)``. The card never enters graph state,
  so no summariser sees it and it is never duplicated; it works with any compaction mechanism. In this mode every
  model request is a freshly pinned context, so ``report.compaction_events`` counts model requests.
  ``mode="persistent"`` writes the cards into state in ``before_model`` whenever the state lacks a verified card
  set (as after a summary replaced it); list it *after* ``SummarizationMiddleware``.
  Both modes sanitise tool outputs for forged cards in ``wrap_tool_call`` (``sanitize_untrusted=True``).
- :class:`PolicyGateMiddleware` — blocks governed tool calls in ``wrap_tool_call`` with an error ``ToolMessage``
  naming the rule (the optional defence-in-depth arm, docs/methods/constraint_rot.md "Use it" 5).
- :func:`pinned_pre_model_hook` — a LangGraph ``pre_model_hook`` that runs an inner hook (LangMem
  ``SummarizationNode``, ``trim_messages``...) and pins the cards into ``llm_input_messages``.

The summary message is recognised by the marker and the text prefix that the *installed* ``SummarizationMiddleware``
writes, read from the package at run time (``_build_new_messages``), so a wording change upstream is followed
without editing this file; extra prefixes (e.g. LangMem's) can be passed as ``summary_prefixes``.

The pinning logic (strip, insert, verify, sanitise, report) is :class:`PinningMiddleware`'s; this module only
converts LangChain messages to agentmill :class:`Message` and back (:func:`to_agentmill`, :func:`from_agentmill`).
``langchain`` is imported lazily: the two middleware classes are built on first access of their names, and a
missing extra raises ``MissingExtraError`` (an ``ImportError``) naming ``pip install 'agentmill[langchain]'``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.lm.base import MissingExtraError
from agentmill.methods.constraint_rot.messages import origin
from agentmill.methods.constraint_rot.pinning.gate import PolicyGate
from agentmill.methods.constraint_rot.pinning.middleware import PinningMiddleware, Placement
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry

MODES = ("ephemeral", "persistent")
CARD_ID_PREFIX = "agentmill-card-"
_LC_SUMMARY_SOURCE = "summarization"  # additional_kwargs["lc_source"] of SummarizationMiddleware's summary


def _require_langchain(what: str) -> None:
    try:
        import langchain.agents.middleware  # noqa: F401
        import langchain_core.messages  # noqa: F401
    except ImportError as e:
        raise MissingExtraError("langchain", what) from e


@functools.lru_cache(maxsize=1)
def langchain_summary_prefix() -> str | None:
    """The text prefix of the summary message the installed ``SummarizationMiddleware`` writes (``None`` if the
    package no longer exposes ``_build_new_messages``; the ``lc_source`` marker is then the only signal)."""
    _require_langchain("the LangChain summary detection")
    from langchain.agents.middleware.summarization import SummarizationMiddleware

    build = getattr(SummarizationMiddleware, "_build_new_messages", None)
    if build is None:
        return None
    try:
        made = build("")
        text = str(made[0].text).strip()
    except Exception:  # noqa: BLE001 - an upstream signature change only disables the prefix signal
        return None
    return text or None


# ----------------------------------------------------------------------------------------------- conversion
def _lc_text(m: Any) -> str:
    content = m.content
    return content if isinstance(content, str) else str(m.text)


def _is_summary(m: Any, text: str, prefixes: Sequence[str]) -> bool:
    if (getattr(m, "additional_kwargs", None) or {}).get("lc_source") == _LC_SUMMARY_SOURCE:
        return True
    return getattr(m, "type", None) == "human" and any(p and text.startswith(p) for p in prefixes)


def to_agentmill(messages: Sequence[Any], *, summary_prefixes: Sequence[str] = ()) -> list[Message]:
    """LangChain messages → agentmill :class:`Message`, labelled for the pinning core: summaries get
    ``origin="summary", trusted=False``, our own card messages ``origin="card"``; the original message rides in
    ``meta["lc"]`` so :func:`from_agentmill` returns it untouched when pinning did not change its text."""
    prefixes = [p for p in (langchain_summary_prefix(), *summary_prefixes) if p]
    roles = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
    out = []
    for m in messages:
        kind = getattr(m, "type", None)
        if kind not in roles:
            raise ValueError(f"to_agentmill: unsupported LangChain message type {kind!r} ({type(m).__name__})")
        text = _lc_text(m)
        meta: dict[str, Any] = {"lc": m, "lc_text": text}
        calls: tuple[ToolCall, ...] = ()
        if kind == "ai":
            calls = tuple(ToolCall(c.get("id") or "", c["name"], dict(c.get("args") or {}))
                          for c in getattr(m, "tool_calls", None) or ())
        if _is_summary(m, text, prefixes):
            meta.update(origin="summary", trusted=False)
        elif str(getattr(m, "id", "") or "").startswith(CARD_ID_PREFIX):
            meta.update(origin="card", trusted=True)
        out.append(Message(role=roles[kind], content=text, tool_calls=calls,
                           tool_call_id=getattr(m, "tool_call_id", None) if kind == "tool" else None,
                           name=getattr(m, "name", None), meta=meta))
    return out


def from_agentmill(messages: Sequence[Message], *, persistent: bool = False) -> list[Any]:
    """agentmill messages → LangChain messages: originals back where the text is unchanged, copies with the new
    text where pinning stripped or quoted something, new Human/System messages for cards (with a stable
    ``agentmill-card-<rule>`` id in persistent mode, so the state reducer replaces rather than duplicates)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    out = []
    for m in messages:
        original = m.meta.get("lc")
        if original is not None:
            out.append(original if m.content == m.meta.get("lc_text")
                       else original.model_copy(update={"content": m.content}))
            continue
        if origin(m) != "card":
            raise ValueError(f"from_agentmill: message without a LangChain original and not a card: {m!r}")
        rid = m.meta.get("rule_id", "all")
        mid = f"{CARD_ID_PREFIX}{rid}" if persistent else f"{CARD_ID_PREFIX}{rid}-{uuid.uuid4().hex[:8]}"
        cls = SystemMessage if m.role == "system" else HumanMessage
        out.append(cls(content=m.content, id=mid))
    return out


def to_langchain(messages: Sequence[Message]) -> list[Any]:
    """agentmill messages → new LangChain messages, for a transcript fed into an agent as its history (unlike
    :func:`from_agentmill`, which restores the originals of messages that came from LangChain)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        if m.role == "user":
            out.append(HumanMessage(m.content))
        elif m.role == "assistant":
            out.append(AIMessage(content=m.content or "", tool_calls=[
                {"id": c.id, "name": c.name, "args": dict(c.arguments)} for c in m.tool_calls]))
        elif m.role == "tool":
            out.append(ToolMessage(content=m.content, tool_call_id=m.tool_call_id or "", name=m.name))
        elif m.role == "system":
            out.append(SystemMessage(m.content))
        else:
            raise ValueError(f"to_langchain: unsupported role {m.role!r}")
    return out


# --------------------------------------------------------------------------------------------- shared logic
class _LangChainPinner:
    """The framework-independent half of :class:`ConstraintPinningMiddleware` (also used by the pre-model hook)."""

    def __init__(self, registry: PolicyRegistry, *, placement: Placement, sanitize_untrusted: bool,
                 verify: Literal["repair", "raise", "warn"], counter: Any, card_role: Literal["user", "system"],
                 summary_prefixes: Sequence[str]):
        self.pin = PinningMiddleware(registry, placement=placement, verify=verify,
                                     sanitize_untrusted=sanitize_untrusted, counter=counter, card_role=card_role)
        self.summary_prefixes = tuple(summary_prefixes)

    @property
    def report(self):  # noqa: ANN201 - PinReport
        return self.pin.report

    def pin_messages(self, messages: Sequence[Any], *, persistent: bool = False) -> list[Any]:
        """Strip, sanitise, insert fresh cards, verify; LangChain messages in and out."""
        converted = to_agentmill(messages, summary_prefixes=self.summary_prefixes)
        return from_agentmill(self.pin.before_model(self.pin.after_compaction(converted)), persistent=persistent)

    def needs_pinning(self, messages: Sequence[Any]) -> bool:
        converted = to_agentmill(messages, summary_prefixes=self.summary_prefixes)
        return any(v != "ok" for v in self.pin.status(converted).values())

    def pin_request(self, request: Any) -> Any:
        """``ModelRequest`` with pinned messages; the system message takes part so ``placement="system"`` works."""
        system = request.system_message
        msgs = ([system] if system is not None else []) + list(request.messages)
        pinned = self.pin_messages(msgs)
        if pinned and getattr(pinned[0], "type", None) == "system":
            return request.override(system_message=pinned[0], messages=pinned[1:])
        return request.override(messages=pinned)

    def sanitize_tool_result(self, result: Any) -> Any:
        """A ``ToolMessage`` whose text carries card delimiters comes back with them quoted (and is counted)."""
        if getattr(result, "type", None) != "tool":
            return result  # a Command: its messages are sanitised when they reach a model request
        text = _lc_text(result)
        clean, forged = self.pin.sanitize(text)
        if not forged:
            return result
        self.pin.report.forged_attempts += 1
        return result.model_copy(update={"content": clean})


def pinned_pre_model_hook(registry: PolicyRegistry, inner: Callable[[dict], dict] | None = None, *,
                          placement: Placement = "after_summary", sanitize_untrusted: bool = True,
                          verify: Literal["repair", "raise", "warn"] = "repair", counter: Any = None,
                          summary_prefixes: Sequence[str] = ()) -> Callable[[dict], dict]:
    """A LangGraph ``pre_model_hook``: run ``inner(state)`` (if any), take its ``llm_input_messages`` (else its
    ``messages``, else the state's), and return them pinned as ``llm_input_messages`` along with the rest of the
    inner update. The cards never enter state. ``hook.report`` is the :class:`PinReport`."""
    _require_langchain("pinned_pre_model_hook")
    if inner is not None and not callable(inner):
        raise ValueError(f"pinned_pre_model_hook: inner must be callable, got {type(inner).__name__}")
    pinner = _LangChainPinner(registry, placement=placement, sanitize_untrusted=sanitize_untrusted, verify=verify,
                              counter=counter, card_role="user", summary_prefixes=summary_prefixes)

    def hook(state: dict) -> dict:
        update = dict(inner(state) or {}) if inner is not None else {}
        source = update.get("llm_input_messages", update.get("messages", state["messages"]))
        update["llm_input_messages"] = pinner.pin_messages(
            [m for m in source if getattr(m, "type", None) != "remove"])
        return update

    hook.report = pinner.report  # type: ignore[attr-defined]
    return hook


# ------------------------------------------------------------------------------------------ middleware classes
@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, type]:
    """Define the ``AgentMiddleware`` subclasses (needs langchain; built once, on first use)."""
    _require_langchain("the LangChain pinning middleware")
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import RemoveMessage, ToolMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    class ConstraintPinningMiddleware(AgentMiddleware):
        """Constraint Pinning as LangChain agent middleware (see the module docstring for the two modes)."""

        def __init__(self, registry: PolicyRegistry, mode: Literal["ephemeral", "persistent"] = "ephemeral",
                     placement: Placement = "after_summary", sanitize_untrusted: bool = True, *,
                     verify: Literal["repair", "raise", "warn"] = "repair", counter: Any = None,
                     card_role: Literal["user", "system"] = "user", summary_prefixes: Sequence[str] = ()):
            super().__init__()
            if mode not in MODES:
                raise ValueError(f"ConstraintPinningMiddleware.mode must be one of {MODES}, got {mode!r}")
            self.mode = mode
            self.sanitize_untrusted = sanitize_untrusted
            self._pinner = _LangChainPinner(registry, placement=placement, sanitize_untrusted=sanitize_untrusted,
                                            verify=verify, counter=counter, card_role=card_role,
                                            summary_prefixes=summary_prefixes)

        @property
        def pin(self) -> PinningMiddleware:
            return self._pinner.pin

        @property
        def report(self):  # noqa: ANN201 - PinReport
            return self._pinner.report

        # ephemeral: request-time injection
        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(self._pinner.pin_request(request) if self.mode == "ephemeral" else request)

        async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return await handler(self._pinner.pin_request(request) if self.mode == "ephemeral" else request)

        # persistent: cards written into state when they are missing (e.g. right after a summary replaced it)
        def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            if self.mode != "persistent" or not self._pinner.needs_pinning(state["messages"]):
                return None
            pinned = self._pinner.pin_messages(state["messages"], persistent=True)
            return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *pinned]}

        async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            return self.before_model(state, runtime)

        # both modes: tool outputs are untrusted; forged cards are quoted before they reach state
        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            result = handler(request)
            return self._pinner.sanitize_tool_result(result) if self.sanitize_untrusted else result

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            result = await handler(request)
            return self._pinner.sanitize_tool_result(result) if self.sanitize_untrusted else result

    class PolicyGateMiddleware(AgentMiddleware):
        """Blocks a tool call that a registered rule's predicate forbids, before the tool runs; the agent gets an
        error ``ToolMessage`` naming the rule. ``gate.log`` keeps every blocked call."""

        def __init__(self, registry: PolicyRegistry):
            super().__init__()
            self.gate = PolicyGate(registry)

        def _blocked(self, request: Any) -> Any | None:
            tc = request.tool_call
            decision = self.gate.check(ToolCall(tc.get("id") or "", tc["name"], dict(tc.get("args") or {})))
            if decision.allowed:
                return None
            return ToolMessage(content=decision.error, tool_call_id=tc.get("id") or "", name=tc["name"],
                               status="error")

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            blocked = self._blocked(request)
            return blocked if blocked is not None else handler(request)

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            blocked = self._blocked(request)
            return blocked if blocked is not None else await handler(request)

    for cls in (ConstraintPinningMiddleware, PolicyGateMiddleware):
        cls.__module__ = __name__
    return {"ConstraintPinningMiddleware": ConstraintPinningMiddleware,
            "PolicyGateMiddleware": PolicyGateMiddleware}


def __getattr__(name: str) -> Any:  # PEP 562: the middleware classes exist once langchain is importable
    if name in ("ConstraintPinningMiddleware", "PolicyGateMiddleware"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CARD_ID_PREFIX", "ConstraintPinningMiddleware", "PolicyGateMiddleware", "from_agentmill",
           "langchain_summary_prefix", "pinned_pre_model_hook", "to_agentmill", "to_langchain"]
