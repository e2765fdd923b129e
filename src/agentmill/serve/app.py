"""The OpenAI-compatible HTTP server (docs/methods/dspark.md): ``/v1/chat/completions`` and ``/v1/completions`` with SSE
streaming, ``/v1/models``, ``/health`` and Prometheus ``/metrics``, over a ``BatchingLoop``.

Chat requests may carry OpenAI ``tools``/``tool_choice``/``parallel_tool_calls`` and ``tool`` / ``tool_calls``
messages (LangChain and the OpenAI Agents SDK drive this server; docs/methods/constraint_rot.md): the tool list is
rendered into the system prompt and the generated text parsed back into ``message.tool_calls`` by
``agentmill.serve.tools`` (formats documented there). A ``required`` or named ``tool_choice`` starts the assistant
turn with ``CALL`` / ``CALL <name>``. With tools and ``stream=true`` the whole generation is buffered and sent at
the end, as tool-call deltas (one chunk with id and name, one with the arguments, per call) or as one content
delta, since a call cannot be told from text before it is complete. Output that looks like a call but names an
undeclared tool or has unparseable arguments is returned as plain content and counted in
``agentmill_tool_call_parse_failures_total{reason}``.

Handlers are asyncio; the engine runs in the loop's worker thread. Events cross over with
``call_soon_threadsafe`` into a per-request ``asyncio.Queue``. A client that disconnects mid-stream aborts its
request, which frees its KV at the next step boundary; a non-streaming client that leaves aborts its request too.

Hostile input (issue 20): bodies are capped while they stream in and ``/v1`` can require a bearer key
(``agentmill.serve.guards``); every field is validated by ``agentmill.serve.schema`` before tokenising, so malformed,
deep or oversized requests get 4xx in OpenAI's error shape (``agentmill.serve.errors``); tokenising and submitting
run off the event loop, so one large prompt cannot stall every other stream.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the handlers' annotations at definition time, and
# ``Request`` is imported lazily inside ``create_app`` (a string annotation could not be resolved).
import asyncio
import concurrent.futures
import dataclasses
import functools
import json
import logging
import time
import uuid
from typing import Any

from agentmill.serve.errors import RequestError, error_body, error_json
from agentmill.serve.guards import BearerAuth, BodyLimit, BodyTooLarge
from agentmill.serve.loop import BatchingLoop
from agentmill.serve.schema import PROMPT_CHARS_PER_TOKEN, check_model, completion_prompt, fit_max_tokens, \
    parse_body, prompt_chars, sampling_from, stream_flags
from agentmill.serve.tools import ParsedOutput, ToolRequest, ToolRequestError, chat_prompt_ids, parse_tool_call, \
    parse_tool_request, template_renders_tool_role

__all__ = ["RequestError", "create_app", "render_chat", "sampling_from", "tool_message"]

log = logging.getLogger("agentmill.serve")


def _template_errors() -> tuple[type[BaseException], ...]:
    """What rendering a client's messages through a chat template can raise on bad input: Python's own errors and
    Jinja's (a template may ``raise_exception`` on, say, roles that do not alternate)."""
    base: tuple[type[BaseException], ...] = (TypeError, ValueError, KeyError, IndexError, AttributeError,
                                             RecursionError)
    try:
        from jinja2 import TemplateError
    except ImportError:
        return base
    return (*base, TemplateError)


def render_chat(tokenizer: Any, messages: Any, tools: ToolRequest | None = None, *, tool_role: bool = True
                ) -> list[int]:
    """Token ids of the chat prompt; with ``tools`` the tool list is in the system message and the assistant turn
    starts with ``tools.prefill`` (:func:`agentmill.lm.chat_tools.chat_prompt_ids`, which the model organism uses
    too). What the template cannot render is the client's input, so it is a 400: naming ``messages``, or no field
    when a tool list was rendered too (a malformed JSON Schema in ``parameters`` fails there)."""
    try:
        return chat_prompt_ids(tokenizer, messages, tools, tool_role=tool_role)
    except ToolRequestError as e:
        raise RequestError(str(e), e.param) from None
    except _template_errors() as e:
        with_tools = tools is not None and tools.active
        raise RequestError(f"the {'messages and tools' if with_tools else 'messages'} cannot be rendered into a "
                           f"prompt: {type(e).__name__}: {e}", None if with_tools else "messages") from None


def tool_message(parsed: ParsedOutput, tools: ToolRequest, finish_reason: str) -> tuple[dict[str, Any], str]:
    """The assistant message and finish reason for a parsed generation (``tool_calls`` → ``content: null``)."""
    calls = parsed.calls if tools.parallel else parsed.calls[:1]
    if not calls:
        return {"role": "assistant", "content": parsed.text}, finish_reason
    return ({"role": "assistant", "content": None,
             "tool_calls": [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                            for c in calls]}, "tool_calls")


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except _template_errors() as e:
        raise RequestError(f"the prompt cannot be tokenised: {type(e).__name__}: {e}", "prompt") from None


async def _until_disconnected(receive: Any) -> None:
    """Return once the client has gone (the ASGI ``http.disconnect`` message; the body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def create_app(loop: BatchingLoop, *, served_model_name: str, api_key: str | None = None,
               max_body_bytes: int = 1 << 20, max_prompt_chars: int | None = None) -> Any:
    """The FastAPI app over ``loop``. ``api_key``: required as ``Authorization: Bearer <key>`` on ``/v1``;
    ``max_body_bytes``: request bodies over it get 413 while they stream in; ``max_prompt_chars``: prompt text
    over it gets 400 before tokenising (default ``PROMPT_CHARS_PER_TOKEN`` per token of context)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.background import BackgroundTask
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect

    from agentmill.serve.metrics import ServerMetrics

    app = FastAPI(title="agentmill", docs_url=None, redoc_url=None)
    # Added innermost first: the key is checked before a byte of the body is read.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    if api_key is not None:
        app.add_middleware(BearerAuth, key=api_key)
    weights = getattr(loop.target.engine_config, "weights", "dense")
    metrics = ServerMetrics(policy=loop.policy, dtype=loop.target.engine_config.dtype,
                            threads=loop.target.engine_config.threads, weights=weights)
    # Which weights and which speculation policy answered: a client comparing formats or policies reads it per
    # response, not from the server's start-up line.
    served_by = {"x-agentmill-weights": weights, "x-agentmill-policy": loop.policy}
    created = int(time.time())
    vocab = loop.target.vocab_size
    context = loop.context_len
    max_chars = max_prompt_chars if max_prompt_chars is not None else PROMPT_CHARS_PER_TOKEN * context
    tool_role = template_renders_tool_role(loop.tok)
    # Tokenising runs here, never on the event loop: on the loop, a 1 MB prompt stalled every other stream for 2.0 s
    # (SmolLM2's tokenizer; 3.8 s on a loaded host), in this thread for 0.25 s at most (the tokenizer releases the
    # GIL). One thread serialises it, so a burst of large prompts cannot take more than one core from the engine, and
    # the tokenizer is never entered by two threads at once.
    tokenize_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentmill-tokenize")

    def error_response(status: int, message: str, kind: str, param: str | None = None,
                       code: str | None = None) -> Any:
        return Response(error_json(message, kind, param, code), status_code=status, media_type="application/json")

    async def off_loop(fn: Any, *args: Any, **kw: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(tokenize_pool, functools.partial(fn, *args, **kw))

    async def parse(request: Request) -> dict[str, Any]:
        body = parse_body(await request.body())
        check_model(body, served_model_name)
        return body

    async def run(prompt: list[int], params: Any, body: dict[str, Any], request: Request, chat: bool,
                  stream: bool, include_usage: bool, tools: ToolRequest | None = None) -> Any:
        if any(t < 0 or t >= vocab for t in prompt):
            raise RequestError(f"token ids must be in [0, {vocab})", "prompt")
        params = dataclasses.replace(params, max_tokens=fit_max_tokens(body, len(prompt), context,
                                                                       "messages" if chat else "prompt"))
        aloop = asyncio.get_running_loop()
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        try:
            # submit waits for the engine thread's next step boundary; off the event loop so streams keep flowing
            rid = await asyncio.to_thread(loop.submit, prompt, params,
                                          lambda ev: aloop.call_soon_threadsafe(q.put_nowait, ev))
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
            # Nobody else notices a non-streaming client leaving: watch for the disconnect and abort, or the
            # engine decodes the whole max_tokens for no one (measured: SmolLM2 still decoding a 1,500-token request
            # 120 s after its client left; now it stops within 0.2 s).
            watcher = asyncio.ensure_future(_until_disconnected(request.receive))

            def gone(t: asyncio.Future) -> None:
                if not t.cancelled() and t.exception() is None:
                    q.put_nowait({"type": "client_gone"})

            watcher.add_done_callback(gone)
            text = []
            try:
                while True:
                    ev = await q.get()
                    if ev["type"] == "delta":
                        text.append(ev["text"])
                    elif ev["type"] == "client_gone":
                        loop.abort(rid)
                        metrics.aborted.inc()
                        return Response(status_code=499)     # nobody reads it; nginx's "client closed request"
                    elif ev["type"] == "error":
                        return error_response(503, ev["message"], "server_error")
                    else:
                        record(ev)
                        content = "".join(text)
                        message, finish = (answer(content, ev["finish_reason"]) if use_tools else
                                           ({"role": "assistant", "content": content}, ev["finish_reason"]))
                        choice = ({"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                                  if chat else
                                  {"index": 0, "text": content, "finish_reason": ev["finish_reason"],
                                   "logprobs": None})
                        return JSONResponse({"id": cid, "object": obj, "created": int(time.time()),
                                             "model": served_model_name, "choices": [choice], "usage": usage(ev)},
                                            headers=served_by)
            finally:
                watcher.cancel()

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

        finished = False

        async def events():
            nonlocal finished
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
                        yield "data: " + json.dumps(error_body(ev["message"], "server_error", None)) + "\n\n"
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

        def abort_unfinished() -> None:
            """Also runs when the client left before the first chunk, when ``events()`` never started (and so its
            ``finally`` never runs)."""
            if not finished:
                loop.abort(rid)
                metrics.aborted.inc()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **served_by},
                                 background=BackgroundTask(abort_unfinished))

    @app.exception_handler(RequestError)
    async def _request_error(_request: Request, e: RequestError) -> Any:
        return error_response(e.status, e.message, e.kind, e.param, e.code)

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Request, e: HTTPException) -> Any:
        """Unknown routes and methods in OpenAI's shape too (Starlette's default is ``{"detail": ...}``)."""
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return error_response(e.status_code, str(e.detail), kind)

    def guarded(handler: Any) -> Any:
        """A handler whose unexpected exception becomes a 500 in OpenAI's shape. Left to Starlette, the exception
        also reaches uvicorn, which closes the connection and so resets the client's pool."""
        async def wrapped(request: Request) -> Any:
            try:
                return await handler(request)
            except (RequestError, BodyTooLarge):
                raise
            except ClientDisconnect:            # left while sending its body: nobody to answer
                return Response(status_code=499)
            except Exception as e:  # noqa: BLE001 - logged with its traceback; the client gets a JSON 500
                log.exception("%s %s failed", request.method, request.url.path)
                return error_response(500, f"internal error: {type(e).__name__}", "server_error")
        wrapped.__name__ = handler.__name__
        return wrapped

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

    async def chat(request: Request) -> Any:
        body = await parse(request)
        params = sampling_from(body)
        stream, include_usage = stream_flags(body)
        try:
            tools = parse_tool_request(body)
        except ToolRequestError as e:
            raise RequestError(str(e), e.param) from None
        n_chars = prompt_chars(body.get("messages")) + (prompt_chars(body.get("tools")) if tools else 0)
        if n_chars > max_chars:
            raise RequestError(f"the messages are {n_chars} characters; this server tokenises at most {max_chars} "
                               f"(the model's context is {context} tokens)", "messages")
        prompt = await off_loop(render_chat, loop.tok, body.get("messages"), tools, tool_role=tool_role)
        return await run(prompt, params, body, request, True, stream, include_usage, tools)

    async def completions(request: Request) -> Any:
        body = await parse(request)
        params = sampling_from(body)
        stream, include_usage = stream_flags(body)
        prompt = completion_prompt(body, vocab=vocab, context=context, max_chars=max_chars)
        if isinstance(prompt, str):
            prompt = await off_loop(encode_prompt, loop.tok, prompt)
        return await run(prompt, params, body, request, False, stream, include_usage)

    app.post("/v1/chat/completions")(guarded(chat))
    app.post("/v1/completions")(guarded(completions))
    return app
