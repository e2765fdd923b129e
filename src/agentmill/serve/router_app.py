"""An OpenAI-compatible face for a learned router (E166): each chat request is routed to one worker.

``create_router_app(router, workers, served_model_name="agentmill-router")`` serves ``/v1/chat/completions``
(the last user message is the query), ``/v1/models`` and ``/health`` with the request validation and error shapes of
``serve.app`` (``sampling_from``, ``check_model``, ``parse_body``, OpenAI error bodies). Every response carries the
chosen worker in the ``x-agentmill-worker`` header and in an ``agentmill`` body field ``{worker, scores,
feature_ms, fallback}`` — the audit trail a hosted router hides. A request may opt workers out with
``"agentmill": {"deny": [...]}``; a worker that raises is marked unavailable for the session and the masked argmax
of the same head picks the fallback (logged, ``fallback: true``). ``stream=true`` is answered buffered (one chunk,
then ``[DONE]``). A per-client token bucket (``rate_per_s``, ``burst``) answers 429 beyond it.
"""


import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from agentmill.serve.errors import RequestError, error_json
from agentmill.serve.guards import BearerAuth, BodyLimit
from agentmill.serve.schema import check_model, parse_body, sampling_from, stream_flags

log = logging.getLogger("agentmill.serve.router")


class RateLimiter:
    """Token bucket per client key: ``burst`` requests at once, refilled at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, burst: int, clock: Any = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.rate, self.burst, self.clock = rate_per_s, burst, clock
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        with self._lock:
            now = self.clock()
            tokens, last = self._state.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            ok = tokens >= 1.0
            self._state[key] = (tokens - 1.0 if ok else tokens, now)
            return ok


def _query_of(body: dict[str, Any]) -> str:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RequestError("'messages' must be a non-empty list", "messages")
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if not isinstance(m, dict) or "role" not in m:
            raise RequestError("each message needs a 'role'", f"messages[{i}]")
        if m["role"] == "user":
            content = m.get("content")
            if isinstance(content, list):  # OpenAI content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if not isinstance(content, str) or not content.strip():
                raise RequestError("the last user message needs text content", f"messages[{i}].content")
            return content
    raise RequestError("no user message to route", "messages")


def create_router_app(router: Any, workers: Mapping[str, Any], *, served_model_name: str = "agentmill-router",
                      rate_per_s: float = 20.0, burst: int = 40, max_body_bytes: int = 1 << 20,
                      api_key: str | None = None) -> Any:
    """The FastAPI app. ``workers`` maps each of ``router.workers`` to an object with ``answer(query)``;
    ``api_key`` (as in ``serve.app``) is required as ``Authorization: Bearer <key>`` on ``/v1``."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.exceptions import HTTPException

    router.check_pool(list(workers))
    app = FastAPI(title="agentmill-router", docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    if api_key is not None:
        app.add_middleware(BearerAuth, key=api_key)
    limiter = RateLimiter(rate_per_s, burst)
    unavailable: set[str] = set()
    created = int(time.time())

    def error_response(status: int, message: str, kind: str, param: str | None = None) -> Any:
        return Response(error_json(message, kind, param), status_code=status, media_type="application/json")

    @app.exception_handler(RequestError)
    async def _request_error(_request: Request, e: RequestError) -> Any:
        return error_response(e.status, e.message, e.kind, e.param)

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Request, e: HTTPException) -> Any:
        return error_response(e.status_code, str(e.detail),
                              "not_found_error" if e.status_code == 404 else "invalid_request_error")

    @app.get("/health")
    async def health() -> Any:
        live = [w for w in router.workers if w not in unavailable]
        return JSONResponse({"status": "ok" if live else "unavailable", "model": served_model_name,
                             "workers": router.workers, "unavailable": sorted(unavailable)},
                            status_code=200 if live else 503)

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": served_model_name, "object": "model", "created": created,
                                            "owned_by": "agentmill"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        client = request.client.host if request.client else "unknown"
        if not limiter.allow(client):
            return error_response(429, "rate limit exceeded for this client; retry later", "rate_limit_error")
        body = parse_body(await request.body())
        check_model(body, served_model_name)
        sampling_from(body)  # same validation as the engine server; workers keep their own decode settings
        stream, _ = stream_flags(body)
        query = _query_of(body)
        opts = body.get("agentmill") or {}
        if not isinstance(opts, dict):
            raise RequestError("'agentmill' must be an object", "agentmill")
        deny = opts.get("deny") or []
        if not isinstance(deny, list) or any(w not in router.workers for w in deny):
            raise RequestError(f"'agentmill.deny' must list workers of {router.workers}", "agentmill.deny")
        fallback = False
        while True:
            allowed = set(router.workers) - set(deny) - unavailable
            if not allowed:
                return error_response(503, "no worker is available for this request", "server_error")
            d = router.route(query, allowed=allowed)
            try:
                res = await asyncio.to_thread(workers[d.worker].answer, query)
                break
            except Exception as e:  # noqa: BLE001 - a failing worker is masked for the session, then the fallback
                log.warning("worker %s failed (%s); masked for this session", d.worker, type(e).__name__)
                unavailable.add(d.worker)
                fallback = True
        audit = {"worker": d.worker, "scores": d.scores, "feature_ms": round(d.feature_ms, 3),
                 "fallback": fallback or d.fallback}
        content = res.answer if res.answer is not None else ""
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        headers = {"x-agentmill-worker": d.worker}
        finish = "stop"
        audit["abstained"] = res.answer is None
        if stream:
            chunk = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": served_model_name, "agentmill": audit,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": content},
                                  "finish_reason": finish}]}

            async def events() -> Any:
                yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
        return JSONResponse({"id": cid, "object": "chat.completion", "created": int(time.time()),
                             "model": served_model_name, "agentmill": audit,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                          "finish_reason": finish}],
                             "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}},
                            headers=headers)

    return app
