"""A minimal OpenAI-compatible app over any agentmill LM, for testing the ``openai:`` backend on 127.0.0.1.

Not the project's server (that is ``agentmill.serve``, a later issue): just enough of the protocol to exercise
the client end to end over real HTTP, plus switches that imitate other servers' faults and gaps: fail N times
with 500, require a key, answer slowly, refuse token logprobs, refuse ``echo`` or ``max_tokens=0``.
"""

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentmill.core.types import Message
from agentmill.lm import GenerateConfig


def make_app(lm: Any, *, model_name: str = "scripted", fail_times: int = 0, api_key: str | None = None,
             delay: float = 0.0, token_logprobs: bool = True, echo: bool = True, max_tokens_zero: bool = True):
    """``lm`` answers every request. ``fail_times``: the next N requests get 500 (``app.state.counters["fail"]``
    can be reset); ``api_key``: required bearer key; ``delay``: seconds before answering; ``token_logprobs``,
    ``echo``, ``max_tokens_zero``: False makes the server refuse that field with 400, like servers lacking it."""
    app = FastAPI()
    state = {"fail": fail_times, "requests": 0}
    app.state.counters = state

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)

    async def guard(req: Request) -> JSONResponse | None:
        state["requests"] += 1
        if api_key and req.headers.get("authorization") != f"Bearer {api_key}":
            return error(401, "invalid api key", "authentication_error")
        if state["fail"] > 0:
            state["fail"] -= 1
            return error(500, "injected failure", "server_error")
        if delay:
            await asyncio.sleep(delay)
        body = await req.json()
        if body.get("model") != model_name:
            return error(404, f"model {body.get('model')!r} not found")
        if body.get("logprobs") and not token_logprobs:
            return error(400, "logprobs is not supported")
        if body.get("echo") and not echo:
            return error(400, "echo is not supported")
        if body.get("max_tokens") == 0 and not max_tokens_zero:
            return error(400, "max_tokens must be at least 1")
        return None

    def config(body: dict[str, Any]) -> GenerateConfig:
        stop = body.get("stop") or ()
        return GenerateConfig(max_new_tokens=body.get("max_tokens") or 64, temperature=body.get("temperature", 1.0),
                              top_p=body.get("top_p", 1.0), n=body.get("n", 1), seed=body.get("seed"),
                              stop=(stop,) if isinstance(stop, str) else tuple(stop))

    def run(prompt: Any, body: dict[str, Any]) -> list[Any] | JSONResponse:
        """``lm.generate`` with its failures as OpenAI-style errors: bad settings 400, anything else 500."""
        try:
            return lm.generate([prompt], config(body))
        except ValueError as e:
            return error(400, str(e))
        except Exception as e:  # noqa: BLE001 - the client must see a JSON error, not a dropped connection
            return error(500, f"{type(e).__name__}: {e}", "server_error")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "agentmill"}]}

    @app.post("/v1/chat/completions")
    async def chat(req: Request):
        if (bad := await guard(req)) is not None:
            return bad
        body = await req.json()
        outs = run([Message.from_dict(m) for m in body["messages"]], body)
        if isinstance(outs, JSONResponse):
            return outs
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model_name,
                "choices": [{"index": i, "message": {"role": "assistant", "content": o.text},
                             "finish_reason": "length" if o.finish_reason == "length" else "stop",
                             "logprobs": {"content": [{"token": str(t), "logprob": lp, "bytes": None,
                                                       "top_logprobs": []}
                                                      for t, lp in zip(o.token_ids, o.logprobs)]}
                             if body.get("logprobs") else None}
                            for i, o in enumerate(outs)],
                "usage": {"prompt_tokens": outs[0].prompt_tokens, "completion_tokens": 0, "total_tokens": 0}}

    @app.post("/v1/completions")
    async def completions(req: Request):
        if (bad := await guard(req)) is not None:
            return bad
        body = await req.json()
        if body.get("echo"):
            # Prompt "tokens" are space-separated words, each -1.0 (the first has none, as on real servers);
            # with max_tokens >= 1 one generated token " x" follows, which a client must drop.
            words = body["prompt"].split(" ")
            offsets, pos = [], 0
            for w in words:
                offsets.append(pos)
                pos += len(w) + 1
            text, logps = body["prompt"], [None] + [-1.0] * (len(words) - 1)
            if body.get("max_tokens"):
                words, offsets, text, logps = words + [" x"], offsets + [len(text)], text + " x", logps + [-9.0]
            lp = {"tokens": words, "token_logprobs": logps, "text_offset": offsets, "top_logprobs": None}
            return {"id": "cmpl-echo", "object": "text_completion", "created": 0, "model": model_name,
                    "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": lp}]}
        outs = run(body["prompt"], body)
        if isinstance(outs, JSONResponse):
            return outs

        def logprobs(o: Any) -> dict[str, Any] | None:
            if not body.get("logprobs"):
                return None
            return {"tokens": [str(t) for t in o.token_ids], "token_logprobs": list(o.logprobs),
                    "text_offset": [0] * len(o.token_ids), "top_logprobs": None}

        return {"id": "cmpl-test", "object": "text_completion", "created": int(time.time()), "model": model_name,
                "choices": [{"index": i, "text": o.text, "logprobs": logprobs(o),
                             "finish_reason": "length" if o.finish_reason == "length" else "stop"}
                            for i, o in enumerate(outs)]}

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1 in a background thread; yield its ``/v1`` base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
