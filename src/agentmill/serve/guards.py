"""ASGI guards that run before any handler: the request-body byte cap and the bearer key.

They are plain ASGI middlewares rather than handler code because both must act before the body is read:

- ``BodyLimit`` counts the bytes of each ``http.request`` message as the handler pulls them and refuses with 413
  as soon as the count passes the cap. Checking ``len(await request.body())`` afterwards (what the server did
  first) buffers the whole body; a chunked upload (``Transfer-Encoding: chunked``, no ``Content-Length``) of 1 GiB
  took the process from 0.4 to 2.5 GB before the check ran. A declared ``Content-Length`` over the cap is refused
  without reading anything. Uvicorn pauses the socket while a body chunk waits unread, so the bytes held per
  request stay near the cap.
- ``BearerAuth`` answers 401 for ``/v1/...`` requests without ``Authorization: Bearer <key>``, compared in
  constant time. ``/health`` and ``/metrics`` stay open for load balancers and scrapers, as on vLLM.

A refusal sent before the body was read says ``connection: close``: the unread remainder of an oversized upload is
then dropped with the connection instead of being read and discarded.
"""

from __future__ import annotations

import hmac
from typing import Any

from agentmill.serve.errors import error_json


class BodyTooLarge(Exception):
    """Raised from the counted ``receive`` once a body passes the cap; turned into a 413 by ``BodyLimit``."""


async def send_error(send: Any, status: int, message: str, kind: str, *, param: str | None = None,
                     code: str | None = None, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = error_json(message, kind, param, code)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    for k, v in scope.get("headers", ()):
        if k.lower() == name:
            return v
    return None


class BodyLimit:
    """Refuse (413) any HTTP request whose body passes ``max_bytes``, while it streams in."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, int(max_bytes)

    def _too_large(self) -> str:
        return f"request body is over {self.max_bytes} bytes"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            return await send_error(send, 413, self._too_large(), "invalid_request_error", code="request_too_large")
        seen = 0
        started = False

        async def counted() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge:
            if started:         # cannot happen for handlers that read the body before answering; never hide it
                raise
            await send_error(send, 413, self._too_large(), "invalid_request_error", code="request_too_large")


class BearerAuth:
    """401 in OpenAI's shape for requests under ``/v1`` that lack ``Authorization: Bearer <key>``."""

    def __init__(self, app: Any, key: str):
        if not key:
            raise ValueError("the API key must not be empty")
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (scope["path"] == "/v1" or scope["path"].startswith("/v1/")):
            got = _header(scope, b"authorization") or b""
            if not hmac.compare_digest(got, self.expected):
                return await send_error(send, 401, "missing or invalid API key (send 'Authorization: Bearer <key>')",
                                        "authentication_error", code="invalid_api_key",
                                        headers=[(b"www-authenticate", b"Bearer")])
        return await self.app(scope, receive, send)
