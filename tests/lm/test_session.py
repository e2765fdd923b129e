"""ChatSession: a turn with the KV cache kept equals a turn that re-prefills the whole conversation."""

from __future__ import annotations

import pytest

from agentmill.lm import GenerateConfig, LMError, load_lm
from agentmill.lm.scripted import ScriptedLM
from agentmill.lm.session import ChatSession, common_prefix

SPEC = "tiny:new?layers=2&d=32&heads=2&max_len=512&seed=7"
TURNS = ["list the files", "open the second one", "now run the tests please"]


def _talk(reuse: bool, cfg: GenerateConfig) -> tuple[ChatSession, list]:
    s = ChatSession(load_lm(SPEC), system="You are a careful coding agent.", reuse=reuse)
    return s, [s.send(t, cfg) for t in TURNS]


@pytest.mark.parametrize("cfg", [GenerateConfig(max_new_tokens=12, temperature=0.0),
                                 GenerateConfig(max_new_tokens=12, temperature=1.0, seed=5)])
def test_kept_cache_gives_the_tokens_of_a_full_reprefill(cfg) -> None:
    kept, a = _talk(True, cfg)
    fresh, b = _talk(False, cfg)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    assert all(t.reused == 0 for t in fresh.turns)
    # From turn 2 on, the earlier turns come from the cache: only the new material is prefilled.
    assert kept.turns[0].reused == 0 and all(t.reused > 0 for t in kept.turns[1:])
    for t, prev in zip(kept.turns[1:], fresh.turns[1:]):
        assert t.reused + t.prefilled == prev.prefilled and t.prefilled < prev.prefilled / 2
    assert [m.role for m in kept.messages] == ["system"] + ["user", "assistant"] * 3


def test_greedy_turn_equals_stateless_generate_on_the_same_conversation() -> None:
    lm = load_lm(SPEC)
    s = ChatSession(lm)
    cfg = GenerateConfig(max_new_tokens=10, temperature=0.0)
    s.send(TURNS[0], cfg)
    history = list(s.messages)
    second = s.send(TURNS[1], cfg)
    from agentmill.core.types import Message

    alone = lm.generate([history + [Message("user", TURNS[1])]], cfg)[0]
    assert second.token_ids == alone.token_ids and second.text == alone.text


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([1, 2], [1, 2]) == 2


def test_a_turn_over_the_context_is_refused_and_leaves_the_conversation_intact() -> None:
    s = ChatSession(load_lm("tiny:new?layers=1&d=16&heads=2&max_len=64"))
    s.send("hi", GenerateConfig(max_new_tokens=4, temperature=0.0))
    before = list(s.messages)
    with pytest.raises(LMError, match="model context"):
        s.send("x" * 200)
    assert s.messages == before and s.cached_tokens == 0  # the cache is dropped, the next turn re-prefills


def test_stop_strings_and_bad_arguments() -> None:
    s = ChatSession(load_lm(SPEC))
    out = s.send("go", GenerateConfig(max_new_tokens=30, temperature=1.0, seed=1, stop_regex="."))
    assert out.finish_reason == "stop" and len(out.text) == 1 and s.messages[-1].content == out.text
    with pytest.raises(ValueError, match="one reply per turn"):
        s.send("again", GenerateConfig(n=2))
    with pytest.raises(TypeError, match="model internals"):
        ChatSession(ScriptedLM(["x"]))
