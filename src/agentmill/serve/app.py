"""The OpenAI-compatible HTTP server (dspark spec §6.4): ``/v1/chat/completions`` and ``/v1/completions`` with SSE
streaming, ``/v1/models``, ``/health`` and Prometheus ``/metrics``, over a ``BatchingLoop``.

Chat requests may carry OpenAI ``tools``/``tool_choice``/``parallel_tool_calls`` and ``tool`` / ``tool_calls``
messages (constraint-rot spec §6.4: LangChain and the OpenAI Agents SDK drive this server): the tool list is
rendered into the system prompt and the generated text parsed back into ``message.tool_calls`` by
``agentmill.serve.tools`` (formats documented there). A ``required`` or named ``tool_choice`` starts the assistant
turn with ``CALL`` / ``CALL <name>``. With tools and ``stream=true`` the whole generation is buffered and sent at
the end, as tool-call deltas (one chunk with id and name, one with the arguments, per call) or as one content
delta, since a call cannot be told from text before it is complete. Output that looks like a call but names an
undeclared tool or has unparseable arguments is returned as plain content and counted in
``agentmill_tool_call_parse_failures_total{reason}``.

Handlers are asyncio; the engine runs in the loop's worker thread. Events cross over with
``call_soon_threadsafe`` into a per-request ``asyncio.Queue``. A client that disconnects mid-stream aborts its
request, which frees its KV at the next step boundary. Malformed requests get OpenAI-style JSON errors (4xx).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the handlers' annotations at definition time, and
# ``Request`` is imported lazily inside ``create_app`` (a string annotation could not be resolved).
import asyncio
import json
import time
import uuid
from typing import Any

from agentmill.lm.engine import SamplingParams
from agentmill.serve.loop import BatchingLoop
from agentmill.serve.tools import ParsedOutput, ToolRequest, ToolRequestError, chat_prompt_ids, parse_tool_call, \
    parse_tool_request, template_renders_tool_role

UNSUPPORTED = ("functions", "function_call", "response_format", "logprobs", "top_logprobs")


class RequestError(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.kind = message, param, status, kind


def _error_body(message: str, kind: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def sampling_from(body: dict[str, Any]) -> SamplingParams:
    """Validate the OpenAI sampling fields; anything that would change the distribution unsupported → 400."""
    for f in UNSUPPORTED:
        if body.get(f) not in (None, [], {}, False):
            raise RequestError(f"'{f}' is not supported by this server", f)
    if body.get("logit_bias"):
        raise RequestError("'logit_bias' is not supported by this server", "logit_bias")
    for f in ("presence_penalty", "frequency_penalty"):
        if body.get(f) not in (None, 0, 0.0):
            raise RequestError(f"'{f}' must be 0 on this server", f)
    if body.get("n", 1) != 1:
        raise RequestError("only n = 1 is supported", "n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 128))
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("'stop' must be a non-empty string or a list of at most 4", "stop")
    try:
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        top_p = float(body.get("top_p", 1.0) if body.get("top_p") is not None else 1.0)
        top_k = int(body.get("top_k", 0) or 0)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise RequestError("'max_tokens' must be an integer", "max_tokens")
        seed = body.get("seed")
        if seed is not None and not isinstance(seed, int):
            raise RequestError("'seed' must be an integer", "seed")
        return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, max_tokens=max_tokens,
                              stop=tuple(stop))
    except (TypeError, ValueError) as e:
        raise RequestError(str(e)) from None


def render_chat(tokenizer: Any, messages: Any, tools: ToolRequest | None = None, *, tool_role: bool = True
                ) -> list[int]:
    """Token ids of the chat prompt; with ``tools`` the tool list is in the system message and the assistant turn
    starts with ``tools.prefill`` (:func:`agentmill.lm.chat_tools.chat_prompt_ids`, which the model organism uses
    too)."""
    try:
        return chat_prompt_ids(tokenizer, messages, tools, tool_role=tool_role)
    except ToolRequestError as e:
        raise RequestError(str(e), e.param) from None


def tool_message(parsed: ParsedOutput, tools: ToolRequest, finish_reason: str) -> tuple[dict[str, Any], str]:
    """The assistant message and finish reason for a parsed generation (``tool_calls`` → ``content: null``)."""
    calls = parsed.calls if tools.parallel else parsed.calls[:1]
    if not calls:
        return {"role": "assistant", "content": parsed.text}, finish_reason
    return ({"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                            for c in calls]}, "tool_calls")


def render_completion(tokenizer: Any, body: dict[str, Any]) -> list[int]:
    if body.get("echo"):
        raise RequestError("'echo' is not supported", "echo")
    if body.get("best_of", 1) != 1:
        raise RequestError("only best_of = 1 is supported", "best_of")
    if body.get("suffix") is not None:
        raise RequestError("'suffix' is not supported", "suffix")
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, str) and p:
        return list(tokenizer.encode(p, add_special_tokens=False))
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return p
    raise RequestError("'prompt' must be a non-empty string, one-element list of strings, or list of token ids",
                       "prompt")


def create_app(loop: BatchingLoop, *, served_model_name: str, api_key: str | None = None,
               max_body_bytes: int = 1 << 20) -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

    from agentmill.serve.metrics import ServerMetrics

    app = FastAPI(title="agentmill", docs_url=None, redoc_url=None)
    metrics = ServerMetrics(policy=loop.policy, dtype=loop.target.engine_config.dtype,
                            threads=loop.target.engine_config.threads)
    created = int(time.time())
    vocab = loop.target.vocab_size
    tool_role = template_renders_tool_role(loop.tok)

    def err(e: RequestError) -> JSONResponse:
        return JSONResponse(_error_body(e.message, e.kind, e.param), status_code=e.status)

    async def parse(request: Request) -> dict[str, Any]:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            raise RequestError("invalid API key", None, 401, "authentication_error")
        raw = await request.body()
        if len(raw) > max_body_bytes:
            raise RequestError(f"request body over {max_body_bytes} bytes", None, 413)
        try:
            body = json.loads(raw)
        except ValueError:
            raise RequestError("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        if body.get("model") not in (None, served_model_name):
            raise RequestError(f"model '{body.get('model')}' does not exist; this server serves "
                               f"'{served_model_name}'", "model", 404, "not_found_error")
        return body

    async def run(prompt: list[int], params: SamplingParams, request: Request, chat: bool, stream: bool,
                  include_usage: bool, tools: ToolRequest | None = None) -> Any:
        if any(t < 0 or t >= vocab for t in prompt):
            raise RequestError(f"token ids must be in [0, {vocab})", "prompt")
        aloop = asyncio.get_running_loop()
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        try:
            rid = loop.submit(prompt, params, lambda ev: aloop.call_soon_threadsafe(q.put_nowait, ev))
        except ValueError as e:
            raise RequestError(str(e), "messages" if chat else "prompt") from None
        metrics.requests.inc()
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        obj = "chat.completion" if chat else "text_completion"

        def usage(done: dict[str, Any]) -> dict[str, int]:
            return {"prompt_tokens": done["prompt_tokens"], "completion_tokens": done["completion_tokens"],
                    "total_tokens": done["prompt_tokens"] + done["completion_tokens"]}

        def record(done: dict[str, Any]) -> None:
            metrics.observe_request(done)

        def answer(text: str, finish_reason: str) -> tuple[dict[str, Any], str]:
            """The tool-aware assistant message for a finished generation (``tools`` active)."""
            assert tools is not None
            parsed = parse_tool_call(tools.prefill + text, [t.name for t in tools.offered])
            failure = parsed.failure or (None if parsed.calls or tools.choice == "auto" else "missing_call")
            if failure:
                metrics.tool_parse_failures.labels(reason=failure).inc()
            message, finish = tool_message(parsed, tools, finish_reason)
            metrics.tool_calls.inc(len(message.get("tool_calls") or ()))
            return message, finish

        use_tools = chat and tools is not None and tools.active

        if not stream:
            text = []
            while True:
                ev = await q.get()
                if ev["type"] == "delta":
                    text.append(ev["text"])
                elif ev["type"] == "error":
                    return JSONResponse(_error_body(ev["message"], "server_error", None), status_code=503)
                else:
                    record(ev)
                    content = "".join(text)
                    message, finish = (answer(content, ev["finish_reason"]) if use_tools else
                                       ({"role": "assistant", "content": content}, ev["finish_reason"]))
                    choice = ({"index": 0, "message": message, "finish_reason": finish, "logprobs": None} if chat else
                              {"index": 0, "text": content, "finish_reason": ev["finish_reason"], "logprobs": None})
                    return JSONResponse({"id": cid, "object": obj, "created": int(time.time()),
                                         "model": served_model_name, "choices": [choice], "usage": usage(ev)})

        chunk_obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(delta: dict[str, Any] | str | None, finish: str | None) -> str:
            if chat:
                choice = {"index": 0, "delta": delta if isinstance(delta, dict) else {}, "finish_reason": finish,
                          "logprobs": None}
            else:
                choice = {"index": 0, "text": delta or "", "finish_reason": finish, "logprobs": None}
            return "data: " + json.dumps({"id": cid, "object": chunk_obj, "created": int(time.time()),
                                          "model": served_model_name, "choices": [choice]}) + "\n\n"

        def tool_chunks(message: dict[str, Any]) -> list[str]:
            """A buffered tool-aware answer as deltas: per call one chunk with id/type/name and empty arguments, then
            one with the arguments (OpenAI's own sequence, which clients accumulate by ``index``)."""
            if not message.get("tool_calls"):
                return [chunk({"content": message["content"]}, None)] if message["content"] else []
            out = []
            for i, tc in enumerate(message["tool_calls"]):
                out.append(chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                                  "function": {"name": tc["function"]["name"], "arguments": ""}}]},
                                 None))
                out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": tc["function"]["arguments"]}}]},
                                 None))
            return out

        async def events():
            finished = False
            buffered: list[str] = []
            try:
                if chat:
                    yield chunk({"role": "assistant", "content": ""}, None)
                while True:
                    ev = await q.get()
                    if ev["type"] == "delta" and use_tools:
                        buffered.append(ev["text"])
                    elif ev["type"] == "delta":
                        yield chunk({"content": ev["text"]} if chat else ev["text"], None)
                    elif ev["type"] == "error":
                        finished = True
                        yield "data: " + json.dumps(_error_body(ev["message"], "server_error", None)) + "\n\n"
                        break
                    else:
                        finished = True
                        record(ev)
                        finish = ev["finish_reason"]
                        if use_tools:
                            message, finish = answer("".join(buffered), finish)
                            for c in tool_chunks(message):
                                yield c
                        yield chunk({} if chat else "", finish)
                        if include_usage:
                            yield "data: " + json.dumps({"id": cid, "object": chunk_obj, "created": int(time.time()),
                                                         "model": served_model_name, "choices": [],
                                                         "usage": usage(ev)}) + "\n\n"
                        break
                yield "data: [DONE]\n\n"
            finally:
                if not finished:          # client went away mid-stream
                    loop.abort(rid)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.exception_handler(RequestError)
    async def _request_error(_request: Request, e: RequestError) -> JSONResponse:
        return err(e)

    @app.get("/health")
    async def health() -> Any:
        ok = loop.alive
        return JSONResponse({"status": "ok" if ok else "unavailable", "model": served_model_name, "policy": loop.policy},
                            status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": served_model_name, "object": "model", "created": created,
                                            "owned_by": "agentmill"}]}

    @app.get("/metrics")
    async def prom() -> Any:
        metrics.set_queue(loop.n_running, loop.n_waiting, loop.stats)
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await parse(request)
        params = sampling_from(body)
        try:
            tools = parse_tool_request(body)
        except ToolRequestError as e:
            raise RequestError(str(e), e.param) from None
        prompt = render_chat(loop.tok, body.get("messages"), tools, tool_role=tool_role)
        so = body.get("stream_options") or {}
        return await run(prompt, params, request, True, bool(body.get("stream")), bool(so.get("include_usage")),
                         tools)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await parse(request)
        params = sampling_from(body)
        prompt = render_completion(loop.tok, body)
        so = body.get("stream_options") or {}
        return await run(prompt, params, request, False, bool(body.get("stream")), bool(so.get("include_usage")))

    return app
