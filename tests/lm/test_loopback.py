"""The loopback stub against the real ``openai:`` client: chat and raw prompts, tool calls, the request log,
concurrent requests, and the errors a malformed request gets."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentmill.core.types import Message, ToolCall
from agentmill.lm import GenerateConfig, LMError, load_lm
from agentmill.lm.loopback import LoopbackError, LoopbackRequest, LoopbackServer

pytest.importorskip("openai")


def _post(url: str, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_openai_client_talks_to_the_stub_and_the_log_keeps_each_request() -> None:
    def reply(r: LoopbackRequest) -> str:
        return f"{'chat' if r.chat else 'raw'}: {r.prompt.split()[-1]} done"

    with LoopbackServer(reply, model="stub-1") as srv:
        assert srv.port > 0 and srv.lm_spec == f"openai:stub-1@http://127.0.0.1:{srv.port}/v1"
        lm = load_lm(srv.lm_spec)
        chat = lm.generate([[Message("system", "Be brief."), Message("user", "say hello")]],
                           GenerateConfig(temperature=0, n=2))
        raw = lm.generate(["count to three"], GenerateConfig(temperature=0, stop=(" done",)))
        models = json.loads(urllib.request.urlopen(f"{srv.base_url}/models", timeout=10).read())
    assert [c.text for c in chat] == ["chat: hello done"] * 2 and chat[0].finish_reason == "stop"
    assert chat[0].logprobs == (-1.0, -1.0, -1.0) and chat[0].prompt_tokens == 4
    assert raw[0].text == "raw: three"  # the client cut at the stop string
    assert models["data"][0]["id"] == "stub-1"
    assert srv.requests == 2 and srv.prompts == ["Be brief.\nsay hello", "count to three"]
    first, second = srv.log
    assert first.chat and first.messages[1] == Message("user", "say hello") and first.body["n"] == 2
    assert second.path == "/v1/completions" and second.body["stop"] == [" done"]
    assert first.headers["authorization"].startswith("Bearer ") and "content-type" in first.headers


def test_a_reply_can_call_tools_or_answer_with_an_http_error() -> None:
    call = ToolCall("call_1", "send_email", {"to": "bob@example.com"})

    def reply(r: LoopbackRequest):
        if "fail" in r.prompt:
            raise LoopbackError(400, "scripted refusal")
        return Message("assistant", "", tool_calls=(call,))

    with LoopbackServer(reply, model="m") as srv:
        from openai import OpenAI

        client = OpenAI(base_url=srv.base_url, api_key="none", max_retries=0)
        resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "email bob"}])
        with pytest.raises(LMError, match="HTTP 400.*scripted refusal"):
            load_lm(srv.lm_spec).generate(["please fail"])
        with pytest.raises(LMError, match="not found"):
            load_lm(f"openai:other@{srv.base_url}").generate(["hi"])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert ToolCall.from_openai(choice.message.tool_calls[0].model_dump()) == call
    assert srv.requests == 3  # the 400 was asked again without logprobs; the unknown model never reached the log


def test_concurrent_requests_are_served_in_parallel() -> None:
    # Four requests must be in the reply function at once to pass the barrier: a serial server would time it out.
    barrier = threading.Barrier(4, timeout=10)

    def reply(r: LoopbackRequest) -> str:
        barrier.wait()
        return r.prompt.upper()

    with LoopbackServer(reply) as srv:
        lm = load_lm(srv.lm_spec, max_retries=0)
        with ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda i: lm.generate([f"p{i}"])[0].text, range(4)))
    assert outs == ["P0", "P1", "P2", "P3"] and sorted(srv.prompts) == ["p0", "p1", "p2", "p3"]


def test_malformed_requests_get_json_errors_and_stay_out_of_the_log() -> None:
    with LoopbackServer(lambda r: "ok", model="m") as srv:
        url = f"{srv.base_url}/chat/completions"
        status, body = _post(url, b'{"model": "m", "messages": [')
        assert status == 400 and "invalid JSON body" in body["error"]["message"]
        assert _post(url, b"[1, 2]")[0] == 400
        assert _post(url, json.dumps({"model": "m"}).encode())[0] == 400  # no messages
        assert _post(url, json.dumps({"model": "m", "messages": [{"role": "robot", "content": "x"}]}).encode())[0] \
            == 400
        assert _post(f"{srv.base_url}/embeddings", b"{}")[0] == 404
        status, body = _post(f"{srv.base_url}/completions",
                             json.dumps({"model": "m", "prompt": "a b", "echo": True, "logprobs": 1}).encode())
        assert status == 400 and "echo" in body["error"]["message"]
        with pytest.raises(LMError, match="lacks prompt logprobs"):
            load_lm(srv.lm_spec).logprobs("a", " b")
        assert srv.requests == 0


def test_only_loopback_hosts_and_a_stopped_server_frees_its_port() -> None:
    with pytest.raises(ValueError, match="loopback only"):
        LoopbackServer(lambda r: "x", host="0.0.0.0")
    srv = LoopbackServer(lambda r: "x")
    srv.stop()  # never started: still releases the socket
    with LoopbackServer(lambda r: "x", port=srv.port) as again:
        assert again.port == srv.port
