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


def test_token_logprobs_and_seeded_sampling_pass_through(base_url) -> None:
    lm = load_lm(f"openai:scripted@{base_url}")
    text = lm.generate(["What is 3 + 4?"], GenerateConfig(temperature=0))[0]
    assert text.logprobs == (-1.0,) * 7  # scripted: -1 per whitespace token of "3 + 4 = 7. Answer: 7"
    chat = [Message("user", "What is 40 + 2?")]
    cfg = GenerateConfig(n=8, temperature=1.0, seed=3)
    first, again = lm.generate([chat], cfg), lm.generate([chat], cfg)
    assert [o.text for o in first] == [o.text for o in again]
    assert len({o.text for o in first}) > 1  # scripted:arith is wrong half the time when sampling


def test_prompt_logprobs_via_echo(base_url) -> None:
    lm = load_lm(f"openai:scripted@{base_url}")
    lps = lm.logprobs("a b", " c d")
    assert lps.dtype == np.float64 and np.allclose(lps, [-1.0, -1.0])


def test_prompt_logprobs_fall_back_to_one_token_and_explain_when_missing() -> None:
    with serve(make_app(load_lm("scripted:constant"), max_tokens_zero=False)) as url:
        # max_tokens=0 refused: asked again with 1, and the generated " x" (logprob -9) is dropped by offset
        assert np.allclose(OpenAILM("scripted", url).logprobs("a b", " c d"), [-1.0, -1.0])
    with serve(make_app(load_lm("scripted:constant"), echo=False)) as url, \
            pytest.raises(LMError, match="lacks prompt logprobs"):
        OpenAILM("scripted", url).logprobs("a b", " c")


def test_server_without_token_logprobs_still_generates() -> None:
    app = make_app(load_lm("scripted:constant"), token_logprobs=False)
    with serve(app) as url:
        lm = OpenAILM("scripted", url)
        out = lm.generate([[Message("user", "hi")], "hi"])
        assert [o.text for o in out] == ["ok", "ok"] and out[0].logprobs == ()
        assert app.state.counters["requests"] == 3  # refused once, then it stops asking


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


def test_timeout_is_reported_as_such() -> None:
    with serve(make_app(load_lm("scripted:constant"), delay=1.0)) as url:
        lm = OpenAILM("scripted", url, timeout=0.2, max_retries=1, backoff=0.01)
        t0 = time.monotonic()
        with pytest.raises(LMError, match="did not answer within the timeout after 2 attempt"):
            lm.generate(["x"])
        assert time.monotonic() - t0 < 3


def test_model_failure_behind_the_server_is_a_bounded_retry_then_lmerror() -> None:
    app = make_app(load_lm("scripted:fail"))
    with serve(app) as url:
        with pytest.raises(LMError, match="HTTP 500 after 2 attempt.*always fails"):
            OpenAILM("scripted", url, max_retries=1, backoff=0.01).generate(["x"])
        assert app.state.counters["requests"] == 2


def test_auth_and_unknown_model_messages(monkeypatch) -> None:
    with serve(make_app(load_lm("scripted:constant"), api_key="sekret")) as url:
        with pytest.raises(LMError, match="401.*OPENAI_API_KEY") as err:
            OpenAILM("scripted", url, api_key="wrong").generate(["x"])
        assert "wrong" not in str(err.value)  # keys never appear in messages
        monkeypatch.setenv("OPENAI_API_KEY", "sekret")
        lm = load_lm(f"openai:scripted@{url}")
        assert lm.generate(["x"])[0].text == "ok" and "sekret" not in repr(lm.info)
        assert OpenAILM("scripted", url, api_key="sekret").generate(["x"])[0].text == "ok"
        with pytest.raises(LMError, match="404.*model name"):
            OpenAILM("nope", url, api_key="sekret").generate(["x"])


@pytest.mark.parametrize("spec", ["openai:gpt-4o", "openai:@http://x", "openai:m@ftp://x", "openai:m@localhost"])
def test_bad_specs(spec) -> None:
    with pytest.raises(ValueError, match="openai"):
        load_lm(spec)


def test_timeout_from_the_environment_and_refused_when_not_positive(monkeypatch) -> None:
    from agentmill.lm.openai_client import DEFAULT_TIMEOUT, TIMEOUT_ENV, OpenAILM

    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert OpenAILM("m", "http://127.0.0.1:9/v1").info["timeout"] == DEFAULT_TIMEOUT
    monkeypatch.setenv(TIMEOUT_ENV, "900")
    assert OpenAILM("m", "http://127.0.0.1:9/v1").info["timeout"] == 900.0
    assert OpenAILM("m", "http://127.0.0.1:9/v1", timeout=5).info["timeout"] == 5  # an explicit value wins
    monkeypatch.setenv(TIMEOUT_ENV, "0")
    with pytest.raises(ValueError, match=TIMEOUT_ENV):
        OpenAILM("m", "http://127.0.0.1:9/v1")


def test_extra_body_reaches_the_server_and_reasoning_comes_back() -> None:
    from agentmill.core.types import Message
    from agentmill.lm.base import GenerateConfig
    from agentmill.lm.loopback import LoopbackServer
    from agentmill.lm.openai_client import OpenAILM

    with LoopbackServer(lambda req: "ok", model="m") as srv:
        lm = OpenAILM("m", srv.base_url, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        out = lm.generate([[Message("user", "hi")]], GenerateConfig(max_new_tokens=4))
        body = srv.log[-1].body
    assert out[0].text == "ok" and body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "reasoning" not in out[0].meta  # the stub sends no reasoning_content
