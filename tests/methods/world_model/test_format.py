"""The Qwen-AgentWorld layout and the observation parser, on inputs small enough to check by hand."""

from __future__ import annotations

import pytest

from agentmill.core.types import Message
from agentmill.methods.world_model.format import (OBS_MARKER, QwenFormat, Turn, action_json, extract_observation,
                                                  render_chatml)

A = {"name": "command", "arguments": {"text": "go north"}}
B = {"name": "command", "arguments": {"text": "take red key"}}
C = {"name": "command", "arguments": {"text": "look"}}


def test_three_turn_golden_messages() -> None:
    fmt = QwenFormat(history_k=None, system_prompt="short", card=True)
    hist = [Turn("o0", A, "o1", 0), Turn("o1", B, "o2", 1)]
    msgs = fmt.messages(hist, Turn("o2", C, "o3", 2), goal="Open the chest.", card="CARD", control="be stingy")
    act = lambda a: '**Action:**\n```json\n{"name": "command", "arguments": {"text": "%s"}}\n```' % a  # noqa: E731
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0].content.endswith("**World Card:**\nCARD")
    assert msgs[1].content == ("### Turn 1\n\n**Task Instruction:**\nOpen the chest.\n\n**Current State:**\no0\n\n"
                               + act("go north"))
    assert msgs[2] == Message("assistant", f"{OBS_MARKER}\no1")
    assert msgs[3].content == "### Turn 2\n\n" + act("take red key")
    assert msgs[5].content == "### Turn 3\n\n" + act("look") + "\n\n**Simulation Instruction:**\nbe stingy"


def test_window_keeps_the_last_k_and_moves_the_state_block() -> None:
    fmt = QwenFormat(history_k=1, card=False)
    hist = [Turn("o0", A, "o1", 0), Turn("o1", B, "o2", 1)]
    msgs = fmt.messages(hist, Turn("o2", C, "o3", 2), goal="g", card="CARD")
    assert "CARD" not in msgs[0].content
    assert len(msgs) == 4 and "**Current State:**\no1" in msgs[1].content and "### Turn 2" in msgs[1].content
    k0 = QwenFormat(history_k=0).messages(hist, Turn("o2", C, "o3", 2), goal="g", card=None)
    assert len(k0) == 2 and "**Current State:**\no2" in k0[1].content


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError):
        QwenFormat(history_k=-1)
    with pytest.raises(ValueError):
        action_json({"name": 3, "arguments": {}})
    with pytest.raises(ValueError):
        action_json({"name": "x", "arguments": {}, "extra": 1})
    with pytest.raises(ValueError):
        action_json("x" * (64 * 1024 + 1))
    with pytest.raises(ValueError):
        extract_observation("x", mode="lenient")  # type: ignore[arg-type]


def test_target_and_chatml() -> None:
    t = QwenFormat.target("obs", "why")
    assert t == "<think>\nwhy\n</think>\n<predicted_observation>\nobs\n</predicted_observation>"
    assert extract_observation(t).observation == "obs" and extract_observation(t).reasoning == "why"
    assert render_chatml([Message("user", "hi")]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("text,strict,official,flag", [
    ("<predicted_observation>A</predicted_observation>", "A", "A", None),
    ("<think>x</think><predicted_observation>A", "A", "A", "unclosed"),
    ("plain", None, "plain", "tag_missing"),
    ("", None, "", "tag_missing"),
    ("junk</think><predicted_observation>C</predicted_observation>", "C", "C", None),
    ("<predicted_observation>1</predicted_observation><predicted_observation>2</predicted_observation>", "2", "2",
     "multiple"),
    (f"<predicted_observation>{OBS_MARKER}\nD</predicted_observation>", "D", "D", None),
    ("<think>a <predicted_observation>B</predicted_observation>", "B", "B", None),
    ("<think>only thinking", None, "", "tag_missing"),
])
def test_parser_hand_cases(text: str, strict: str | None, official: str, flag: str | None) -> None:
    s = extract_observation(text, mode="strict")
    o = extract_observation(text, mode="official")
    assert s.observation == strict and o.observation == official
    if flag:
        assert s.flags[flag]
    assert o.flags["fallback_used"] == (s.observation is None)
