"""The ASGI guards on their own, driven with hand-made ASGI messages: what they pull from ``receive`` and what they
send (the same guards over real HTTP are in test_hostile_input.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentmill.serve.errors import error_json
from agentmill.serve.guards import BearerAuth, BodyLimit


def run(guard, scope, receive=None):
    sent = []

    async def send(m):
        sent.append(m)

    async def nothing():
        raise AssertionError("the guard read the body")

    asyncio.run(guard({"type": "http", "path": "/v1/completions", "headers": [], **scope}, receive or nothing, send))
    return sent


async def reads_all(scope, receive, send):
    """An app that reads the whole body, as ``Request.body()`` does, then answers 200."""
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_body_limit_stops_pulling_an_endless_chunked_body_at_the_cap():
    pulled = []

    async def endless():
        pulled.append(1)
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    sent = run(BodyLimit(reads_all, max_bytes=10_000), {}, endless)
    assert len(pulled) == 11                             # 10 chunks reach the cap exactly; the 11th passes it
    assert sent[0]["status"] == 413 and (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_too_large"


def test_body_limit_refuses_a_declared_length_unread_and_passes_bodies_within_the_cap():
    sent = run(BodyLimit(reads_all, max_bytes=10), {"headers": [(b"content-length", b"11")]})
    assert sent[0]["status"] == 413

    async def small():
        return {"type": "http.request", "body": b"x" * 10, "more_body": False}

    assert run(BodyLimit(reads_all, max_bytes=10), {"headers": [(b"content-length", b"10")]}, small)[0]["status"] == 200


def test_bearer_auth_guards_v1_only_and_compares_the_whole_header():
    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    guard = BearerAuth(ok, key="k")
    for headers in ([], [(b"authorization", b"k")], [(b"authorization", b"Bearer k2")],
                    [(b"authorization", b"Bearer ")]):
        sent = run(guard, {"headers": headers})
        assert sent[0]["status"] == 401 and json.loads(sent[1]["body"])["error"]["type"] == "authentication_error"
    assert run(guard, {"headers": [(b"authorization", b"Bearer k")]})[0]["status"] == 200
    assert run(guard, {"path": "/health"})[0]["status"] == 200
    assert run(guard, {"path": "/v1"})[0]["status"] == 401 and run(guard, {"path": "/v1x"})[0]["status"] == 200
    with pytest.raises(ValueError):
        BearerAuth(ok, key="")


def test_error_json_survives_lone_surrogates():
    body = json.loads(error_json("model '\ud800' does not exist", "not_found_error", "model"))
    assert body == {"error": {"message": "model '\ud800' does not exist", "type": "not_found_error",
                              "param": "model", "code": None}}
