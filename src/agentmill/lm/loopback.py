"""A small OpenAI-compatible stub server on 127.0.0.1, for tests and experiments that must exercise the real
``openai:`` client (sockets, JSON, the SDK's parsing) offline.

It is not the project's server (``agentmill.serve`` runs real models with batching): a reply function decides every
answer, so a test scripts the "model" in a line. stdlib ``http.server`` only (no FastAPI, no extra to install), one
thread per request, in a daemon thread of the calling process; it binds loopback addresses only.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (one reply, repeated for ``n`` choices), ``GET
/v1/models`` and ``GET /health``. "Tokens" are space-separated words: usage counts them and, when logprobs are
asked for, each gets -1.0. The reply is returned whole (``max_tokens`` is not applied; the client applies stop
strings). ``echo`` (prompt logprobs) is refused with 400, so ``OpenAILM.logprobs`` says the endpoint lacks them.
A reply function may return an assistant :class:`~agentmill.core.types.Message` to answer with tool calls, or
raise :class:`LoopbackError` to answer with an HTTP error. Every accepted request is kept in :attr:`LoopbackServer.log`
so a test can check from the server side what was sent (e.g. that no call repeated, that no prompt leaked).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentmill.core.types import Message

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class LoopbackRequest:
    """One accepted completion request, as the reply function and the request log see it."""

    path: str
    """``/v1/chat/completions`` or ``/v1/completions``."""
    body: dict[str, Any]
    """The parsed JSON body."""
    headers: dict[str, str]
    """Request headers, names in lower case (``authorization`` included: the log stays in memory)."""
    prompt: str
    """Chat: the messages' contents joined by newlines; completions: the prompt text."""
    messages: tuple[Message, ...] = field(default=())
    """Chat only: the conversation."""

    @property
    def chat(self) -> bool:
        return self.path.endswith("/chat/completions")


class LoopbackError(Exception):
    """Raised by a reply function to answer with ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


Reply = Callable[[LoopbackRequest], "str | Message"]
"""``reply(request) -> text`` or an assistant ``Message`` (its ``tool_calls`` become the choice's tool calls)."""


class LoopbackServer:
    """``with LoopbackServer(reply, model="m") as srv:`` serves ``reply`` at ``srv.base_url`` (``…/v1``);
    ``srv.lm_spec`` is the ``openai:`` spec for :func:`agentmill.lm.load_lm`. ``port=0`` takes a free port, known
    as ``srv.port`` as soon as the server is built. ``log`` keeps every accepted request, ``prompts`` their prompt
    texts, ``requests`` their count."""

    def __init__(self, reply: Reply, *, model: str = "loopback", host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in LOOPBACK_HOSTS:
            raise ValueError(f"LoopbackServer binds loopback only ({', '.join(LOOPBACK_HOSTS)}), got host={host!r}")
        self.reply, self.model = reply, model
        self.log: list[LoopbackRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        self.lm_spec = f"openai:{model}@{self.base_url}"
        self._thread: threading.Thread | None = None

    @property
    def prompts(self) -> list[str]:
        with self._lock:
            return [r.prompt for r in self.log]

    @property
    def requests(self) -> int:
        return len(self.log)

    def start(self) -> LoopbackServer:
        if self._thread is not None:
            raise RuntimeError("LoopbackServer already started")
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"loopback-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (also when never started)."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
        self._httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------- answers
    def answer(self, path: str, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The (status, JSON body) for a POST of ``body`` to ``path``."""
        chat = path == "/v1/chat/completions"
        if not chat and path != "/v1/completions":
            return _error(404, f"no route {path}")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        if body.get("model") != self.model:
            return _error(404, f"model {body.get('model')!r} not found (this stub serves {self.model!r})")
        if not chat and body.get("echo"):
            return _error(400, "echo (prompt logprobs) is not supported by this endpoint")
        try:
            if chat:
                messages = tuple(Message.from_dict(m) for m in body["messages"])
                req = LoopbackRequest(path, body, headers, "\n".join(m.content for m in messages), messages)
            else:
                prompt = body["prompt"]
                if not isinstance(prompt, str):
                    raise TypeError("prompt must be a string")
                req = LoopbackRequest(path, body, headers, prompt)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return _error(400, f"invalid request: {type(e).__name__}: {e}")
        with self._lock:
            self.log.append(req)
            seq = len(self.log)
        try:
            out = self.reply(req)
        except LoopbackError as e:
            return _error(e.status, e.message, e.kind)
        except Exception as e:  # noqa: BLE001 - the client must see a JSON error, not a dropped connection
            return _error(500, f"reply failed: {type(e).__name__}: {e}", "server_error")
        msg = out if isinstance(out, Message) else Message("assistant", str(out))
        return 200, self._completion(req, msg, seq)

    def _completion(self, req: LoopbackRequest, msg: Message, seq: int) -> dict[str, Any]:
        words = msg.content.split(" ")
        n_prompt = len(req.prompt.split())
        head = {"id": f"cmpl-{seq}", "created": int(time.time()), "model": self.model,
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(words),
                          "total_tokens": n_prompt + len(words)}}
        n = int(req.body.get("n") or 1)
        want_lp = bool(req.body.get("logprobs"))
        if req.chat:
            message: dict[str, Any] = {"role": "assistant", "content": msg.content}
            if msg.tool_calls:
                message["tool_calls"] = [tc.to_openai() for tc in msg.tool_calls]
            lp = ({"content": [{"token": w, "logprob": -1.0, "bytes": None, "top_logprobs": []} for w in words]}
                  if want_lp else None)
            finish = "tool_calls" if msg.tool_calls else "stop"
            choices = [{"index": i, "message": message, "finish_reason": finish, "logprobs": lp} for i in range(n)]
            return {**head, "object": "chat.completion", "choices": choices}
        offsets, pos = [], 0
        for w in words:
            offsets.append(pos)
            pos += len(w) + 1
        lp = ({"tokens": words, "token_logprobs": [-1.0] * len(words), "text_offset": offsets, "top_logprobs": None}
              if want_lp else None)
        choices = [{"index": i, "text": msg.content, "finish_reason": "stop", "logprobs": lp} for i in range(n)]
        return {**head, "object": "text_completion", "choices": choices}


def _error(status: int, message: str, kind: str = "invalid_request_error") -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": kind, "code": status}}


def _handler(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: callers print their own progress
            pass

        def _send(self, status: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/health", "/v1/models"):
                self._send(200, {"object": "list",
                                 "data": [{"id": server.model, "object": "model", "owned_by": "agentmill"}]})
            else:
                self._send(*_error(404, f"no route {self.path}"))

        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(n) or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                self._send(*_error(400, f"invalid JSON body: {e}"))
                return
            self._send(*server.answer(self.path, body, {k.lower(): v for k, v in self.headers.items()}))

    return Handler
