"""Where an eviction payload goes: the last distractor tool output inside the summarised span."""

from __future__ import annotations

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.attacks.cases import attack_index


def _tool(text: str, origin: str = "distractor") -> Message:
    return Message("tool", text, tool_call_id="c", name="read_file", meta={"origin": origin})


def test_attack_index_skips_the_kept_tail_and_non_distractor_outputs() -> None:
    msgs = [Message("system", "s", meta={"origin": "system"}), _tool("first output"), _tool("second output"),
            _tool("policy page", origin="policy"), _tool("   "), Message("user", "tail 1"), _tool("tail tool"),
            Message("user", "tail 3"), Message("assistant", "tail 4")]
    # keep_last=4 keeps msgs[5:]; msgs[4] is blank, msgs[3] is not a distractor: the payload goes into msgs[2]
    assert attack_index(msgs, 4) == 2
    # with a longer kept tail the candidate span shrinks to msgs[:2]
    assert attack_index(msgs, 7) == 1
    assert attack_index(msgs, 8) is None
    assert attack_index([Message("user", "u")], 0) is None
