"""The openai: backend against a real HTTP server on 127.0.0.1 (a minimal OpenAI-compatible app)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from agentmill.core.types import Message
from agentmill.lm import GenerateConfig, LMError, load_lm
from agentmill.lm.openai_client import OpenAILM
from tests.helpers.openai_app import free_port, make_app, serve


@pytest.fixture(scope="module")
def base_url():
    with serve(make_app(load_lm("scripted:arith"))) as url:
        yield url


def test_chat_and_text_roundtrip(base_url) -> None:
    lm = load_lm(f"openai:scripted@{base_url}")
    out = lm.generate([[Message("user", "What is 40 + 2?")]], GenerateConfig(temperature=0))[0]
    assert out.text.endswith("Answer: 42") and out.logprobs
    outs = lm.generate(["Question: What is 3 + 4?\nSolution:"], GenerateConfig(n=3, temperature=0))
    assert [o.text for o in outs] == ["3 + 4 = 7. Answer: 7"] * 3
    cut = lm.generate(["What is 3 + 4?"], GenerateConfig(temperature=0, stop=(". Answer",)))[0]
    assert cut.text == "3 + 4 = 7" and cut.finish_reason == "stop"


def test_prompt_logprobs_via_echo(base_url) -> None:
    lm = load_lm(f"openai:scripted@{base_url}")
    assert np.allclose(lm.logprobs("a b", " c d"), [-1.0, -1.0])


def test_unreachable_endpoint_fails_fast_and_clearly() -> None:
    lm = OpenAILM("m", f"http://127.0.0.1:{free_port()}/v1", timeout=2, max_retries=1, backoff=0.01)
    t0 = time.monotonic()
    with pytest.raises(LMError, match="could not connect to http://127.0.0.1:.*is the server running"):
        lm.generate(["hi"])
    assert time.monotonic() - t0 < 10


def test_server_errors_are_retried_a_bounded_number_of_times() -> None:
    app = make_app(load_lm("scripted:constant"), fail_times=2)
    with serve(app) as url:
        ok = OpenAILM("scripted", url, max_retries=2, backoff=0.01)
        assert ok.generate(["x"])[0].text == "ok"  # two 500s, then success
        assert app.state.counters["requests"] == 3
        app.state.counters["fail"] = 10
        with pytest.raises(LMError, match="HTTP 500 after 3 attempt"):
            ok.generate(["x"])
        assert app.state.counters["requests"] == 6


def test_auth_and_unknown_model_messages() -> None:
    with serve(make_app(load_lm("scripted:constant"), api_key="sekret")) as url:
        with pytest.raises(LMError, match="401.*OPENAI_API_KEY"):
            OpenAILM("scripted", url, api_key="wrong").generate(["x"])
        assert OpenAILM("scripted", url, api_key="sekret").generate(["x"])[0].text == "ok"
        with pytest.raises(LMError, match="404.*model name"):
            OpenAILM("nope", url, api_key="sekret").generate(["x"])


@pytest.mark.parametrize("spec", ["openai:gpt-4o", "openai:@http://x", "openai:m@ftp://x", "openai:m@localhost"])
def test_bad_specs(spec) -> None:
    with pytest.raises(ValueError, match="openai"):
        load_lm(spec)
