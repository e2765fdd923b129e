"""Intranet stub: a stdlib ``http.server`` on 127.0.0.1:<ephemeral> serving seeded pages and recording POSTs.

Why the host check lives in the client: the sandbox must never touch the network [R], so
``check_url`` refuses any URL whose host is not the stub's own loopback address (or the fixed alias
``intranet.local``, which is mapped to the stub without any DNS lookup, so transcripts do not carry a port that
changes between runs). Refused attempts are remembered so the grader can still see them.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

INTRANET_HOST = "intranet.local"
MAX_POST_BYTES = 1 << 20


@dataclass(frozen=True)
class HttpPost:
    path: str
    body: str


class SiteData:
    """Pages (path → text) and recorded POSTs shared between the server thread and the sandbox."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.posts: list[HttpPost] = []
        self.lock = threading.Lock()

    def reset(self, pages: dict[str, str]) -> None:
        with self.lock:
            self.pages = dict(pages)
            self.posts = []

    def get(self, path: str) -> tuple[int, str]:
        with self.lock:
            page = self.pages.get(path)
        return (200, page) if page is not None else (404, f"Not found: {path}")

    def post(self, path: str, body: str) -> tuple[int, str]:
        with self.lock:
            self.posts.append(HttpPost(path, body))
            n = len(self.posts)
        return 200, f"Received {len(body)} characters (post #{n})."


class _Handler(BaseHTTPRequestHandler):
    server_version = "OfficeSandbox/1"
    protocol_version = "HTTP/1.1"

    def _reply(self, status: int, text: str) -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        self._reply(*self.server.site.get(urlsplit(self.path).path or "/"))  # type: ignore[attr-defined]

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", "0") or 0)
        if n > MAX_POST_BYTES:
            self._reply(413, "Payload too large")
            return
        body = self.rfile.read(n).decode("utf-8", errors="replace")
        self._reply(*self.server.site.post(urlsplit(self.path).path or "/", body))  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # silence per-request stderr lines
        return


class HttpStub:
    """The stub server on its own daemon thread; ``port`` is the kernel-assigned port."""

    def __init__(self, site: SiteData):
        self.site = site
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.site = site  # type: ignore[attr-defined]
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="office-http", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)


def check_url(url: str, port: int | None) -> str:
    """The request path for ``url`` if it targets the stub, else ``ValueError`` naming the host."""
    parts = urlsplit(url.strip())
    if not parts.scheme and not parts.netloc and parts.path.startswith("/"):
        return parts.path + (f"?{parts.query}" if parts.query else "")  # a bare intranet path
    if parts.scheme != "http":
        raise ValueError(f"only http:// intranet URLs are reachable, got scheme {parts.scheme!r} in {url!r}")
    host = (parts.hostname or "").lower()
    own = host == "127.0.0.1" and (port is None or parts.port == port)
    if not (own or (host == INTRANET_HOST and parts.port in (None, 80))):
        raise ValueError(f"host {parts.netloc or url!r} is not reachable from the sandbox "
                         f"(only {INTRANET_HOST} is); no network access")
    path = parts.path or "/"
    return path + (f"?{parts.query}" if parts.query else "")


def request(port: int, method: str, path: str, body: str | None, *, timeout: float) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body.encode("utf-8") if body is not None else None
        headers = {"Content-Type": "text/plain; charset=utf-8"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", errors="replace")
    finally:
        conn.close()
