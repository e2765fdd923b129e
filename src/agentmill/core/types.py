"""Plain data types for conversations and agent trajectories.

They are frozen dataclasses with ``to_dict``/``from_dict`` so that every layer (methods, servers, run records)
can pass them around and write them to JSON without knowing about each other.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by an assistant turn (OpenAI ``tool_calls`` shape)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments)}}

    @classmethod
    def from_openai(cls, d: dict[str, Any]) -> ToolCall:
        fn = d["function"]
        args = fn.get("arguments") or "{}"
        return cls(id=d.get("id", ""), name=fn["name"], arguments=json.loads(args) if isinstance(args, str) else args)


@dataclass(frozen=True)
class Message:
    """One chat turn. ``tool_call_id`` links a ``tool`` message to the call it answers."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ValueError(f"Message.role must be one of {_ROLES}, got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"Message.content must be str, got {type(self.content).__name__}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        return cls(role=d["role"], content=d.get("content") or "",
                   tool_calls=tuple(ToolCall.from_openai(t) for t in d.get("tool_calls") or ()),
                   tool_call_id=d.get("tool_call_id"), name=d.get("name"))


@dataclass(frozen=True)
class Step:
    """One environment step of an agent: what it saw, what it did, what it got."""

    observation: str
    action: str
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trajectory:
    """A finished episode. ``reward`` is the outcome reward; ``None`` means unscorable (never a failure)."""

    steps: tuple[Step, ...]
    reward: float | None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(steps=tuple(Step(**s) for s in d["steps"]), reward=d["reward"], meta=dict(d.get("meta", {})))


@dataclass(frozen=True)
class Group:
    """Trajectories sampled for the same prompt/task: the unit of GRPO-style group statistics."""

    key: str
    trajectories: tuple[Trajectory, ...]

    @property
    def rewards(self) -> list[float | None]:
        return [t.reward for t in self.trajectories]
