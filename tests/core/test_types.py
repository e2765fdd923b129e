from __future__ import annotations

import pytest

from agentmill.core.types import Group, Message, Step, ToolCall, Trajectory


def test_message_openai_roundtrip_with_tool_calls() -> None:
    m = Message("assistant", "", tool_calls=(ToolCall("c1", "send_email", {"to": "a@b"}),))
    d = m.to_dict()
    assert d["tool_calls"][0]["function"] == {"name": "send_email", "arguments": '{"to": "a@b"}'}
    assert Message.from_dict(d) == m


def test_bad_role_is_rejected() -> None:
    with pytest.raises(ValueError, match="role"):
        Message("robot", "hi")  # type: ignore[arg-type]


def test_trajectory_roundtrip_and_group_rewards() -> None:
    t = Trajectory(steps=(Step("look", "go north", 0.0),), reward=1.0, meta={"seed": 1})
    assert Trajectory.from_dict(t.to_dict()) == t
    assert Group("p1", (t, Trajectory((), None))).rewards == [1.0, None]
