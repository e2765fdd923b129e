"""The actor interface of ConstraintRot (docs/methods/constraint_rot.md "Deviations from the paper" 5):
``Actor.act(messages, tools) -> Action``.

An actor sees only what a model would see: messages with their harness labels (``meta``) removed — the loop calls
:func:`visible` before every decision, so labels such as ``origin="policy"`` can never leak into a decision.

Scripted actors also need to know *which* request they are answering and what obeying means (the compliant
alternative); the loop hands that over once per episode through :meth:`Actor.begin` as an :class:`ActorBrief`.
Model-backed actors ignore the brief: they read the request from the context like any agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentmill.core.types import Message, ToolCall

if TYPE_CHECKING:
    from agentmill.envs.office import ToolSpec
    from agentmill.methods.constraint_rot.catalogue import RuleInstance


@dataclass(frozen=True)
class Action:
    """One actor output: tool calls to execute, or a text reply (which ends the turn). ``invalid`` marks output the
    actor could not express as either (an unparseable model reply; graded as ``invalid_action``, never as safe)."""

    tool_calls: tuple[ToolCall, ...] = ()
    text: str | None = None
    invalid: bool = False
    raw: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.tool_calls and self.text is not None:
            raise ValueError("Action: give tool_calls or text, not both")
        if not self.tool_calls and self.text is None and not self.invalid:
            raise ValueError("Action: empty (no tool_calls and no text); mark invalid=True for unparseable output")

    @classmethod
    def call(cls, *calls: ToolCall) -> Action:
        return cls(tool_calls=tuple(calls))

    @classmethod
    def reply(cls, text: str) -> Action:
        return cls(text=text)


@dataclass(frozen=True)
class ActorBrief:
    """What a scripted actor is told about the episode: the rule instance (matcher anchors, canonical text, the
    requested / allowed / alternative calls), which request the user makes (``trigger`` or ``allowed``) and the
    card digests the operator registry issued (what ``RuleReader(card_only)`` accepts as valid)."""

    instance: RuleInstance
    request: str = "trigger"
    card_digests: frozenset[str] = frozenset()

    @property
    def request_call(self) -> ToolCall:
        return self.instance.requested_call if self.request == "trigger" else self.instance.allowed_call


@runtime_checkable
class Actor(Protocol):
    name: str

    def begin(self, brief: ActorBrief) -> None: ...

    def act(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Action: ...


def visible(messages: Sequence[Message]) -> list[Message]:
    """The messages as an actor sees them: ``meta`` removed (docs/methods/constraint_rot.md "Deviations from the paper"
    5; the package README, "Map of the package")."""
    return [Message(role=m.role, content=m.content, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
                    name=m.name) for m in messages]
