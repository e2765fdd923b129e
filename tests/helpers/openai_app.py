"""A minimal OpenAI-compatible app over any agentmill LM, for testing the ``openai:`` backend on 127.0.0.1.

Not the project's server (that is ``agentmill.serve``, a later issue): just enough of the protocol to exercise
the client end to end over real HTTP, plus fault switches (fail N times with 500, require a key).
"""

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


def make_app(lm: Any, *, model_name: str = "scripted", fail_times: int = 0, api_key: str | None = None):
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
        return None

    def config(body: dict[str, Any]) -> GenerateConfig:
        stop = body.get("stop") or ()
        return GenerateConfig(max_new_tokens=body.get("max_tokens") or 64, temperature=body.get("temperature", 1.0),
                              top_p=body.get("top_p", 1.0), n=body.get("n", 1), seed=body.get("seed"),
                              stop=(stop,) if isinstance(stop, str) else tuple(stop))

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "agentmill"}]}

    @app.post("/v1/chat/completions")
    async def chat(req: Request):
        if (bad := await guard(req)) is not None:
            return bad
        body = await req.json()
        if body.get("model") != model_name:
            return error(404, f"model {body.get('model')!r} not found")
        msgs = [Message.from_dict(m) for m in body["messages"]]
        outs = lm.generate([msgs], config(body))
        return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model_name,
                "choices": [{"index": i, "message": {"role": "assistant", "content": o.text},
                             "finish_reason": "length" if o.finish_reason == "length" else "stop",
                             "logprobs": {"content": [{"token": str(t), "logprob": lp, "bytes": None,
                                                       "top_logprobs": []}
                                                      for t, lp in zip(o.token_ids, o.logprobs)]}}
                            for i, o in enumerate(outs)],
                "usage": {"prompt_tokens": outs[0].prompt_tokens, "completion_tokens": 0, "total_tokens": 0}}

    @app.post("/v1/completions")
    async def completions(req: Request):
        if (bad := await guard(req)) is not None:
            return bad
        body = await req.json()
        if body.get("model") != model_name:
            return error(404, f"model {body.get('model')!r} not found")
        if body.get("echo"):
            words = body["prompt"].split(" ")
            offsets, pos = [], 0
            for w in words:
                offsets.append(pos)
                pos += len(w) + 1
            lp = {"tokens": words, "token_logprobs": [None] + [-1.0] * (len(words) - 1), "text_offset": offsets,
                  "top_logprobs": None}
            return {"id": "cmpl-echo", "object": "text_completion", "created": 0, "model": model_name,
                    "choices": [{"index": 0, "text": body["prompt"], "finish_reason": "length", "logprobs": lp}]}
        outs = lm.generate([body["prompt"]], config(body))
        return {"id": "cmpl-test", "object": "text_completion", "created": int(time.time()), "model": model_name,
                "choices": [{"index": i, "text": o.text, "logprobs": None,
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
