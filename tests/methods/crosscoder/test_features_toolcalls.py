"""Feature ranking (Cohen's d, AUROC, E175's selection rule) and tool-call scoring, on hand-checkable inputs."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.crosscoder.features import rank_features
from agentmill.methods.crosscoder.toolcalls import emits_tool_tag, score_tool_call


def test_cohen_d_auroc_and_selection_by_hand() -> None:
    pos = np.array([[2.0, 0.0, 1.0], [4.0, 0.0, 1.0]])
    neg = np.array([[0.0, 1.0, 1.0], [0.0, 3.0, 1.0]])
    t = rank_features(pos, neg)
    # latent 0: μ 3 vs 0, var (2, 0) → pooled sqrt(1) = 1 → d = 3; latent 1: d = −2/sqrt(1) = −2; latent 2: 0
    assert t.index.tolist() == [0, 2, 1]
    assert t.cohen_d.tolist() == pytest.approx([3.0, 0.0, -2.0])
    assert t.auroc.tolist() == pytest.approx([1.0, 0.5, 0.0])
    assert t.top(100) == [0] and t.top(1) == [0]
    assert t.fire_pos.tolist() == [1.0, 1.0, 0.0]
    sub = rank_features(pos, neg, slice(1, 3))
    assert sub.index.tolist() == [2, 1]
    with pytest.raises(ValueError):
        rank_features(pos[:1], neg)


GOOD = '<tool_call>{"name": "get_weather", "arguments": {"city": " Paris "}}</tool_call>'


def test_strict_and_lax_side_by_side() -> None:
    s = score_tool_call(GOOD, gold_name="get_weather", tools=["get_weather", "set_timer"],
                        gold_args={"city": "paris"})
    assert (s.strict_format, s.tool_exact, s.args_exact, s.lax_format, s.lax_tool, s.overall) == (
        True, True, True, True, True, 2)
    wrong = score_tool_call(GOOD.replace("get_weather", "set_timer"), gold_name="get_weather",
                            tools=["get_weather", "set_timer"])
    assert wrong.strict_format and not wrong.tool_exact and wrong.overall == 1
    # lax counts a listed tool named in JSON-ish text that strict rejects (no arguments object, no closing tag)
    lax_only = score_tool_call('<tool_call> "name": "weather"', gold_name="get_weather", tools=["get_weather"])
    assert not lax_only.strict_format and lax_only.lax_format and lax_only.lax_tool and lax_only.overall == 1
    none = score_tool_call("Sorry, I cannot do that.", gold_name="get_weather", tools=["get_weather"])
    assert none.overall == -1 and not none.lax_format and not emits_tool_tag("plain text")
    unlisted = score_tool_call('<tool_call>{"name": "fly", "arguments": {}}</tool_call>', gold_name="x",
                               tools=["get_time"])
    assert unlisted.strict_format and unlisted.overall == 0
    bad_json = score_tool_call('<tool_call>{"name": "x", "arguments": {</tool_call>', gold_name="x", tools=["x"])
    assert not bad_json.strict_format and bad_json.lax_format
    huge = "<tool_call>" + '{"name": "x", "arguments": {}, "pad": "' + "a" * 11_000 + '"}</tool_call>'
    assert not score_tool_call(huge, gold_name="x", tools=["x"]).strict_format
