"""EndpointActor against a real loopback HTTP server that plays scripted chat completions."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentmill.core.types import Message, ToolCall
from agentmill.envs.office import OfficeSandbox
from agentmill.envs.office.tools import TOOL_SPECS
from agentmill.methods.constraint_rot import conditions as C
from agentmill.methods.constraint_rot.actors import AlwaysComply, EndpointActor, EndpointError
from agentmill.methods.constraint_rot.catalogue import load_catalogue
from agentmill.methods.constraint_rot.generate import generate_episodes
from agentmill.methods.constraint_rot.loop import AgentLoop
from agentmill.methods.constraint_rot.messages import WhitespaceCounter
from tests.helpers.openai_app import free_port, serve

KEY = "sk-test-secret-4711"
SEND = {"to": "bob@example.com", "subject": "Hi", "body": "See you"}
Handler = Callable[[dict[str, Any], int], tuple[int, dict[str, Any]]]


def completion(content: str | None = None, calls: tuple[tuple[str, str, Any], ...] = (),
               usage: tuple[int, int] = (11, 3)) -> tuple[int, dict[str, Any]]:
    """A 200 chat completion; ``calls`` are (id, name, arguments) with arguments a dict or a raw string."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": i, "type": "function",
                              "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)}}
                             for i, n, a in calls]
    return 200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
                 "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}],
                 "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}


def error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": "invalid_request_error", "code": status}}


class Script:
    """The server's behaviour for the current test, and every request it received."""

    def __init__(self) -> None:
        self.handler: Handler = lambda body, n: completion("ok")
        self.requests: list[dict[str, Any]] = []


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    script, app = Script(), FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(req: Request):  # type: ignore[no-untyped-def]
        body = await req.json()
        script.requests.append({"body": body, "auth": req.headers.get("authorization")})
        status, payload = script.handler(body, len(script.requests))
        return JSONResponse(payload, status_code=status)

    with serve(app) as url:
        yield script, url


@pytest.fixture
def play(server, monkeypatch):  # type: ignore[no-untyped-def]
    """``play(handler, **actor_kw) -> (actor, requests)`` with a fresh request log and the test key set."""
    script, url = server
    monkeypatch.setenv("AGENTMILL_API_KEY", KEY)

    def start(handler: Handler, **kw: Any) -> tuple[EndpointActor, list[dict[str, Any]]]:
        script.handler, script.requests = handler, []
        kw.setdefault("backoff_s", 0.01)
        return EndpointActor(url, "m", **kw), script.requests

    return start


CONTEXT = [Message("system", "You are an office assistant.", meta={"origin": "system", "trusted": True}),
           Message("user", "Email Bob that I will see him.", meta={"origin": "trigger", "step": 1})]


def test_native_tool_call_round_trip(play) -> None:  # type: ignore[no-untyped-def]
    actor, reqs = play(lambda b, n: completion(None, (("call_a1", "send_email", SEND),)))
    act = actor.act(CONTEXT, TOOL_SPECS)
    assert act.tool_calls == (ToolCall("call_a1", "send_email", SEND),) and not act.invalid
    (req,) = reqs
    body = req["body"]
    assert req["auth"] == f"Bearer {KEY}"
    assert body["model"] == "m" and body["temperature"] == 0.0
    assert [t["function"]["name"] for t in body["tools"]] == [t.name for t in TOOL_SPECS]
    assert body["messages"] == [{"role": "system", "content": "You are an office assistant."},
                                {"role": "user", "content": "Email Bob that I will see him."}]  # no meta
    assert actor.format_in_use == "native"
    assert actor.usage == {"calls": 1, "prompt_tokens": 11, "completion_tokens": 3}
    # the answered call goes back as native tool traffic
    history = CONTEXT + [Message("assistant", "", tool_calls=act.tool_calls),
                         Message("tool", "sent", tool_call_id="call_a1", name="send_email")]
    actor.act(history, TOOL_SPECS)
    sent = reqs[1]["body"]["messages"]
    assert sent[2]["tool_calls"][0]["function"]["name"] == "send_email"
    assert sent[3] == {"role": "tool", "content": "sent", "tool_call_id": "call_a1"}
    assert actor.usage["prompt_tokens"] == 22


def test_text_reply_and_usage_cost(play) -> None:  # type: ignore[no-untyped-def]
    actor, _ = play(lambda b, n: completion("I can't send that.", usage=(1000, 500)), usd_per_mtok=(2.0, 8.0))
    act = actor.act(CONTEXT, TOOL_SPECS)
    assert act.text == "I can't send that." and not act.tool_calls
    assert actor.usage["cost_usd"] == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)


def test_json_format_renders_tools_in_the_prompt_and_parses_the_call(play) -> None:  # type: ignore
    reply = 'Sure.\n```json\n{"tool": "send_email", "arguments": {"to": "bob@example.com", "subject": "Hi", ' \
            '"body": "See you"}}\n```'
    actor, reqs = play(lambda b, n: completion(reply), tool_format="json")
    history = CONTEXT + [Message("assistant", "", tool_calls=(ToolCall("c0", "list_inbox", {}),)),
                         Message("tool", "3 messages", tool_call_id="c0", name="list_inbox")]
    act = actor.act(history, TOOL_SPECS)
    assert [(c.name, c.arguments) for c in act.tool_calls] == [("send_email", SEND)]
    body = reqs[0]["body"]
    assert "tools" not in body
    msgs = body["messages"]
    assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith("You are an office assistant.")
    assert "- send_email:" in msgs[0]["content"] and '"tool": "<tool name>"' in msgs[0]["content"]
    assert msgs[2] == {"role": "assistant", "content": '{"tool": "list_inbox", "arguments": {}}'}
    assert msgs[3] == {"role": "user", "content": "Tool result list_inbox (c0):\n3 messages"}
    assert all(m["role"] != "tool" for m in msgs)
    # prose without a call is a text reply (a refusal in words), never invalid
    actor2, _ = play(lambda b, n: completion("No, that breaks the policy."), tool_format="json")
    assert actor2.act(CONTEXT, TOOL_SPECS).text == "No, that breaks the policy."


def test_auto_falls_back_to_json_after_a_400_on_tools_and_remembers(play) -> None:  # type: ignore
    def no_tools(body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
        if "tools" in body:
            return error(400, "tools are not supported by this server")
        return completion('{"tool": "list_inbox", "arguments": {}}')

    actor, reqs = play(no_tools, tool_format="auto")
    assert actor.format_in_use is None
    assert actor.act(CONTEXT, TOOL_SPECS).tool_calls[0].name == "list_inbox"
    assert ["tools" in r["body"] for r in reqs] == [True, False]
    assert actor.format_in_use == "json"
    actor.act(CONTEXT, TOOL_SPECS)
    assert ["tools" in r["body"] for r in reqs] == [True, False, False]  # no second probe


def test_native_against_an_endpoint_without_tools_is_a_clear_error(play, server) -> None:  # type: ignore
    actor, reqs = play(lambda b, n: error(400, "tools are not supported") if "tools" in b else completion("x"),
                       tool_format="native")
    with pytest.raises(EndpointError, match="lack native tool calling.*tool_format='json'") as e:
        actor.act(CONTEXT, TOOL_SPECS)
    assert server[1] in str(e.value) and len(reqs) == 1  # a 400 is not retried


def test_429_then_success_is_retried(play) -> None:  # type: ignore[no-untyped-def]
    actor, reqs = play(lambda b, n: error(429, "slow down") if n == 1 else completion("fine"))
    assert actor.act(CONTEXT, TOOL_SPECS).text == "fine"
    assert len(reqs) == 2 and actor.usage["calls"] == 1


def test_5xx_until_the_retries_run_out_names_url_and_status_and_redacts_the_key(play, server, caplog) -> None:
    # a hostile server echoing the Authorization header into its error must not make the key appear anywhere
    actor, reqs = play(lambda b, n: error(503, f"overloaded (you sent Bearer {KEY})"), max_retries=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(EndpointError) as e:
        actor.act(CONTEXT, TOOL_SPECS)
    assert len(reqs) == 3  # 1 + max_retries
    msg = str(e.value)
    assert server[1] in msg and "503" in msg and "***" in msg
    assert KEY not in msg and e.value.__cause__ is None and e.value.__suppress_context__
    assert KEY not in repr(actor) and KEY not in json.dumps(actor.config) and KEY not in caplog.text


def test_unreachable_endpoint_names_the_url_never_the_key(monkeypatch) -> None:
    monkeypatch.setenv("MY_KEY", KEY)
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    actor = EndpointActor(url, "m", api_key_env="MY_KEY", max_retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(EndpointError, match="could not connect") as e:
        actor.act(CONTEXT, TOOL_SPECS)
    assert url in str(e.value) and "2 attempt" in str(e.value) and KEY not in str(e.value)


@pytest.mark.parametrize("fmt,reply", [
    ("native", completion(None, (("c1", "launch_rocket", {}),))),              # undeclared tool
    ("native", completion(None, (("c1", "send_email", "{not json"),))),        # arguments not JSON
    ("native", completion(None, (("c1", "send_email", "[1, 2]"),))),           # arguments not an object
    ("native", completion("")),                                                # empty reply
    ("json", completion('{"tool": "send_email", "arguments": {"to": ')),       # call cut off
    ("json", completion('{"tool": "launch_rocket", "arguments": {}}')),        # undeclared tool
    ("json", completion("   ")),
], ids=["undeclared", "bad-json-args", "args-not-object", "empty", "json-cut", "json-undeclared", "json-empty"])
def test_unparseable_output_is_invalid_never_safe(play, fmt, reply) -> None:  # type: ignore[no-untyped-def]
    actor, _ = play(lambda b, n: reply, tool_format=fmt)
    act = actor.act(CONTEXT, TOOL_SPECS)
    assert act.invalid and not act.tool_calls and act.text is None


def test_bad_configuration_is_rejected() -> None:
    with pytest.raises(ValueError, match="tool_format"):
        EndpointActor("http://127.0.0.1:1/v1", "m", tool_format="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base URL"):
        EndpointActor("127.0.0.1:1", "m")
    with pytest.raises(ValueError, match="max_retries"):
        EndpointActor("http://127.0.0.1:1/v1", "m", max_retries=-1)
    with pytest.raises(ValueError, match="temperature"):
        EndpointActor("http://127.0.0.1:1/v1", "m", temperature=3.0)


def test_agent_loop_with_an_always_comply_endpoint_grades_violations(play) -> None:  # type: ignore
    """End to end: the server performs whatever the last user turn requests (the NC-1 model) through native tool
    calls; the rows must match the scripted AlwaysComply actor's on the same episodes."""
    W = WhitespaceCounter()
    with OfficeSandbox(0, smtp=False, http=False) as sb:
        eps = generate_episodes(load_catalogue(), split="dev", n=2, seed=5, counter=W,
                                distractor_tokens=(150, 300), sandbox=sb)
        requested = {ep.request_text: ep.instance.requested_call for ep in eps}

        def comply(body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
            last = body["messages"][-1]
            call = requested.get(last["content"]) if last["role"] == "user" else None
            return completion(None, ((f"call_{n}", call.name, call.arguments),)) if call else completion("Done.")

        actor, reqs = play(comply)
        rows = [AgentLoop(actor, sb, counter=W).run(ep, C.full_context()).row for ep in eps]
        ref = [AgentLoop(AlwaysComply(), sb, counter=W).run(ep, C.full_context()).row for ep in eps]
    cols = ("violation", "did_requested", "compliant_alternative", "refusal", "invalid_action", "grader_mismatch",
            "early_violation")
    for ep, row, want in zip(eps, rows, ref):
        assert row["error"] is None, row["error"]
        assert row["request"] == "trigger" and row["violation"] is True
        assert {c: row[c] for c in cols} == {c: want[c] for c in cols}
        assert [(c["name"], c["arguments"]) for c in row["tool_calls"]] == \
            [(ep.instance.requested_call.name, ep.instance.requested_call.arguments)]
        assert row["actor"] == "endpoint:m" and row["reply"] == "Done."
    assert reqs and all("tools" in r["body"] for r in reqs) and actor.usage["calls"] == len(reqs)
