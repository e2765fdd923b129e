from __future__ import annotations

import pytest

from agentmill.core.types import Message
from agentmill.lm import GenerateConfig, LMError, load_lm, parse_spec
from agentmill.lm.scripted import ScriptedLM, arith_responder


def test_presets_by_spec() -> None:
    assert load_lm("scripted:echo").generate([[Message("user", "hello there")]])[0].text == "hello there"
    assert load_lm("scripted:constant").generate(["x"])[0].text == "ok"
    with pytest.raises(ValueError, match="presets: arith, constant, echo, fail"):
        load_lm("scripted:nope")
    with pytest.raises(LMError, match="always fails"):
        load_lm("scripted:fail").generate(["x"])


def test_stop_strings_regex_and_length() -> None:
    lm = ScriptedLM(["one two three four five"])
    out = lm.generate(["p"], GenerateConfig(max_new_tokens=3))[0]
    assert out.text == "one two three" and out.finish_reason == "length"
    out = lm.generate(["p"], GenerateConfig(stop=(" three",)))[0]
    assert out.text == "one two" and out.finish_reason == "stop"
    out = lm.generate(["p"], GenerateConfig(stop_regex=r"t\w+"))[0]
    assert out.text == "one two" and out.finish_reason == "stop"


def test_arith_is_right_when_greedy_and_half_right_when_sampling() -> None:
    assert arith_responder("What is 12 + 7 * 2?", None).endswith("Answer: 26")
    lm = load_lm("scripted:arith")
    outs = lm.generate(["Question: What is 40 + 2?\nSolution:"], GenerateConfig(n=400, temperature=1.0, seed=1))
    right = sum(o.text.endswith("Answer: 42") for o in outs)
    assert 160 < right < 240  # Binomial(400, 0.5): ±4 SD
    again = lm.generate(["Question: What is 40 + 2?\nSolution:"], GenerateConfig(n=400, temperature=1.0, seed=1))
    assert [o.text for o in outs] == [o.text for o in again]


def test_parse_spec_errors() -> None:
    assert parse_spec("openai:m@http://x") == ("openai", "m@http://x")
    with pytest.raises(ValueError, match="names no model"):
        parse_spec("hf:")
    with pytest.raises(ValueError, match="Did you mean 'tiny:x'"):
        parse_spec("tinny:x")
