"""The request schema's pure functions on inputs small enough to check by hand (the HTTP-level regressions are in
test_hostile_input.py, the fuzz in test_fuzz_request_schema.py)."""

from __future__ import annotations

import pytest

from agentmill.serve.errors import RequestError
from agentmill.serve.schema import MAX_JSON_DEPTH, fit_max_tokens, parse_body, prompt_chars, sampling_from, \
    stream_flags


def refused(fn, *args, **kw) -> RequestError:
    with pytest.raises(RequestError) as e:
        fn(*args, **kw)
    assert e.value.status == 400
    return e.value


def test_parse_body_bounds_depth_and_refuses_what_json_does_not_allow():
    assert parse_body(b'{"a": [1, {"b": "x"}]}') == {"a": [1, {"b": "x"}]}
    nested = b'{"a": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"
    assert parse_body(nested)                                    # exactly MAX_JSON_DEPTH levels
    assert "nests deeper" in refused(parse_body, b'{"a": [' + nested + b"]}").message
    assert "nests deeper" in refused(parse_body, b"[" * 100_000 + b"]" * 100_000).message   # RecursionError
    assert "NaN" in refused(parse_body, b'{"t": NaN}').message
    assert "Infinity" in refused(parse_body, b'{"t": -Infinity}').message
    assert "not valid Unicode" in refused(parse_body, b'{"\\udc00": 1}').message             # keys too
    assert "JSON object" in refused(parse_body, b"[1]").message
    assert "not valid JSON" in refused(parse_body, b"\xff\xfe{").message


def test_prompt_chars_counts_strings_and_containers():
    assert prompt_chars("abc") == 3
    assert prompt_chars([{"role": "user", "content": "hi"}]) == 32 + 32 + 4 + 2      # list, dict, two strings
    assert prompt_chars([{}] * 10) == 32 * 11


def test_sampling_from_types_ranges_and_seed_folding():
    p = sampling_from({"temperature": 0, "top_p": 0.5, "top_k": -1, "seed": -1, "stop": "x"})
    assert (p.temperature, p.top_p, p.top_k, p.seed, p.stop) == (0.0, 0.5, 0, 2 ** 32 - 1, ("x",))
    assert sampling_from({"seed": 2 ** 32 + 5}).seed == 5
    for field, value in [("temperature", "1"), ("temperature", 2.5), ("temperature", float("inf")),
                         ("top_p", 0), ("top_k", 1.0), ("top_k", -2), ("seed", 2 ** 63), ("seed", True),
                         ("n", 2), ("max_tokens", 0), ("max_tokens", 1.5), ("presence_penalty", "0"),
                         ("logit_bias", {"1": 1}), ("logprobs", True)]:
        assert refused(sampling_from, {field: value}).param == field, (field, value)


def test_fit_max_tokens_names_the_limit():
    assert fit_max_tokens({}, 10, 100, "prompt") == 90                            # omitted: the room left
    assert fit_max_tokens({}, 10, 1000, "prompt") == 128                          # the default, when it fits
    assert fit_max_tokens({"max_tokens": 90}, 10, 100, "prompt") == 90
    e = refused(fit_max_tokens, {"max_tokens": 91}, 10, 100, "prompt")
    assert e.param == "max_tokens" and "100 tokens" in e.message and "at most 90" in e.message
    e = refused(fit_max_tokens, {"max_completion_tokens": 10 ** 9, "max_tokens": 5}, 10, 100, "prompt")
    assert e.param == "max_completion_tokens"
    assert refused(fit_max_tokens, {}, 100, 100, "messages").param == "messages"


def test_stream_flags():
    assert stream_flags({}) == (False, False)
    assert stream_flags({"stream": True, "stream_options": {"include_usage": True}}) == (True, True)
    assert stream_flags({"stream": None, "stream_options": None}) == (False, False)
    assert refused(stream_flags, {"stream_options": "yes"}).param == "stream_options"
    assert refused(stream_flags, {"stream_options": {"include_usage": 1}}).param == "stream_options.include_usage"
    assert refused(stream_flags, {"stream": "true"}).param == "stream"
