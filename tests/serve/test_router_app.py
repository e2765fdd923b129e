"""The router's OpenAI-compatible face: audit header and body field, opt-out, outage fallback, errors, rate limit."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from agentmill.methods.router import OutcomeTable, Router, RouterConfig  # noqa: E402
from agentmill.methods.router.workers import WorkerResult  # noqa: E402
from agentmill.serve.router_app import RateLimiter, create_router_app  # noqa: E402


class Echo:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail, self.calls = name, fail, 0

    def answer(self, query: str, context=()) -> WorkerResult:
        self.calls += 1
        if self.fail:
            raise ConnectionError("endpoint down")
        return WorkerResult(f"{self.name}:{query[:10]}", 0.0, 0.0)


@pytest.fixture(scope="module")
def router() -> Router:
    rows, texts, ids = [], {}, []
    for i in range(60):
        kind = ("math", "words")[i % 2]
        qid = f"q{i}"
        ids.append(qid)
        texts[qid] = f"{kind} question {i}"
        for w in ("a", "b"):
            rows.append({"query_id": qid, "worker": w, "score": float((w == "a") == (kind == "math")), "cost": 0})
    r = Router(RouterConfig(es=False), ["a", "b"])
    r.fit(OutcomeTable.from_long(rows), ids[:40], ids[40:], texts)
    return r


def _chat(c: TestClient, text: str, **extra):
    return c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": text}], **extra})


def test_routes_and_reports_the_worker(router) -> None:
    c = TestClient(create_router_app(router, {"a": Echo("a"), "b": Echo("b")}))
    r = _chat(c, "math question 7")
    assert r.status_code == 200 and r.headers["x-agentmill-worker"] == "a"
    body = r.json()
    assert body["agentmill"]["worker"] == "a" and not body["agentmill"]["fallback"]
    assert set(body["agentmill"]["scores"]) == {"a", "b"} and body["choices"][0]["message"]["content"].startswith("a:")
    r = _chat(c, "math question 7", agentmill={"deny": ["a"]})
    assert r.headers["x-agentmill-worker"] == "b" and r.json()["agentmill"]["fallback"]
    s = _chat(c, "words question 3", stream=True)
    assert s.status_code == 200 and s.text.rstrip().endswith("data: [DONE]") and '"b:' in s.text
    assert c.get("/v1/models").json()["data"][0]["id"] == "agentmill-router"
    assert c.get("/health").json()["status"] == "ok"


def test_outage_masks_the_worker_for_the_session(router) -> None:
    a, b = Echo("a", fail=True), Echo("b")
    c = TestClient(create_router_app(router, {"a": a, "b": b}))
    r = _chat(c, "math question 1")
    assert r.status_code == 200 and r.headers["x-agentmill-worker"] == "b" and r.json()["agentmill"]["fallback"]
    _chat(c, "math question 2")
    assert a.calls == 1 and c.get("/health").json()["unavailable"] == ["a"]


def test_request_errors(router) -> None:
    c = TestClient(create_router_app(router, {"a": Echo("a"), "b": Echo("b")}))
    assert c.post("/v1/chat/completions", json={"messages": []}).json()["error"]["param"] == "messages"
    assert _chat(c, "x", agentmill={"deny": ["zz"]}).status_code == 400
    assert _chat(c, "x", model="other").status_code == 404
    assert _chat(c, "x", n=2).status_code == 400
    with pytest.raises(ValueError, match="absent"):
        create_router_app(router, {"a": Echo("a")})


def test_rate_limit(router) -> None:
    c = TestClient(create_router_app(router, {"a": Echo("a"), "b": Echo("b")}, rate_per_s=0.001, burst=2))
    codes = [_chat(c, "math question 1").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    t = [0.0]
    lim = RateLimiter(1.0, 1, clock=lambda: t[0])
    assert lim.allow("x") and not lim.allow("x") and lim.allow("y")
    t[0] = 1.0
    assert lim.allow("x")
