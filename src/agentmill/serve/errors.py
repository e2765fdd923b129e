"""OpenAI's error shape, the one way this server refuses a request:
``{"error": {"message": str, "type": str, "param": str | None, "code": str | None}}``.

Clients (the official SDK, LangChain, the Agents SDK) parse this body to raise ``BadRequestError`` and friends; a
plain-text or framework-default body (``{"detail": ...}``) surfaces there as an opaque failure instead. Every
refusal, from the ASGI guards as well as the handlers, is rendered by :func:`error_json`.
"""

from __future__ import annotations

import json
from typing import Any


class RequestError(Exception):
    """A refused request: ``status`` (4xx), OpenAI ``kind`` (``invalid_request_error``, ``authentication_error``,
    ``not_found_error``), ``param`` the path of the offending field (``messages[0].role``) or ``None``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code


def error_body(message: str, kind: str, param: str | None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_json(message: str, kind: str, param: str | None = None, code: str | None = None) -> bytes:
    """The error body as bytes. ASCII-escaped on purpose: messages quote client input, and a lone surrogate from a
    JSON ``"\\ud800"`` escape cannot be encoded as UTF-8 (a UTF-8 JSON renderer would turn the refusal into a
    500)."""
    return json.dumps(error_body(message, kind, param, code), ensure_ascii=True).encode("ascii")
