"""FastAPI participant app [R]. ``create_app(store, study, test_mode)``; ``serve(...)`` runs uvicorn.

Hardening: CSP ``default-src 'self'``, ``nosniff``, no CORS, bodies > 16 KB -> 413 (counted while the body is read,
so a chunked body without ``Content-Length`` is cut off at 16 KB too), per-token rate limit (20 requests/s),
parameterised SQL only, unknown/expired token -> one identical 404 body, trial or event before consent -> 403, a
field of the wrong type, non-finite (NaN/Infinity are refused by the JSON parser) or out of range -> 422 naming the
field, ``rt_ms`` below the study's ``min_rt_ms`` -> 422, conflicting duplicate -> 409, ``complete`` before all trials
-> 409, admin without its bearer token -> 401. Consent and the quiz act once: a replayed consent (or a quiz posted
after it was passed) answers the stored status and changes nothing. No token, PID or IP is logged. ``test_mode``
(loopback only) adds fault injection.

The study config (``web/study.py``) comes from the database it is pinned in; ``serve`` pins the ``--study`` YAML
(or the defaults) before the first request, so consent text, token lifetime, recruitment cap and exclusion rules
are fixed for the study's life.
"""

# no ``from __future__ import annotations``: FastAPI resolves the routes' ``Request`` annotation at definition time
import asyncio
import json
import math
import os
import secrets
import time
from collections import defaultdict, deque
from pathlib import Path

STATIC = Path(__file__).with_name("static")
NOT_FOUND = {"detail": "not found"}
MAX_BODY_BYTES = 16 * 1024
"""Every request body the page sends is well under 1 KB; 16 KB leaves room and bounds what one request can store."""
RATE_PER_S = 20
"""Requests per second per participant token (the page sends at most a few)."""
SECURITY_HEADERS = [(b"content-security-policy", b"default-src 'self'"), (b"x-content-type-options", b"nosniff"),
                    (b"cache-control", b"no-store")]


class Harden:
    """Plain ASGI middleware (Starlette's ``@app.middleware("http")`` wraps every request in an extra task and
    body stream, server CPU the trial PUT pays on each acknowledgement): ``gate(scope)`` may answer early; the body
    is then read here, at most ``max_body`` bytes, before the app sees it; every response gets the security headers.

    Why the body is counted here and not only from ``Content-Length``: a chunked request has no length header, and
    ``request.body()`` would buffer all of it (one 200 MB chunked POST was stored whole). Reading stops with the first
    chunk past the cap and the request is answered 413; the app receives the buffered body as one message."""

    def __init__(self, app, gate, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.gate = gate
        self.max_body = max_body

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        names = {k for k, _ in SECURITY_HEADERS}

        async def send_hardened(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": headers + SECURITY_HEADERS}
            await send(message)

        early = self.gate(scope)
        if early is not None:
            return await early(scope, receive, send_hardened)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before its body ended: nobody to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return await _too_large()(scope, receive, send_hardened)
            chunks.append(chunk)
            more = message.get("more_body", False)
        replayed = False

        async def receive_buffered():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: only the disconnect message is left

        await self.app(scope, receive_buffered, send_hardened)


def _too_large():
    from starlette.responses import JSONResponse

    return JSONResponse({"detail": f"body too large (limit {MAX_BODY_BYTES} bytes)"}, status_code=413)


class BadField(ValueError):
    """A participant-API body or field that fails validation; answered 422 with this message (never a 500)."""


def _reject_constant(name: str):
    raise BadField(f"the body is not strict JSON ({name} is not a number JSON allows)")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):  # 1e999 parses to inf
        raise BadField(f"the body holds a number out of range ({text[:40]})")
    return v


def parse_body(raw: bytes) -> dict:
    """The request body as a JSON object (empty body: ``{}``). NaN, Infinity and overflowing floats are refused by
    the parser itself, so no non-finite number can reach a handler or the database; too-deep nesting, bad UTF-8,
    lone surrogate escapes and non-objects are ``BadField``."""
    try:
        body = json.loads(raw or b"{}", parse_constant=_reject_constant, parse_float=_finite_float)
    except BadField:
        raise
    except RecursionError:
        raise BadField("the body is nested too deeply") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, an int beyond Python's digit limit
        raise BadField("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadField(f"the body must be a JSON object, got a JSON {type(body).__name__}")
    stack = [body]  # iterative: the parser allowed nesting as deep as the recursion limit
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:  # a "\ud800" escape: not text, and SQLite cannot store it
                raise BadField("the body holds a lone UTF-16 surrogate escape, which is not text") from None
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return body


def _show(v) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def number_field(b: dict, key: str, lo: float, hi: float, *, optional: bool = False) -> float | None:
    """``b[key]`` as a float in ``[lo, hi]``; ``True``/``False`` are not numbers here (``bool`` is an ``int`` in
    Python, so ``true`` once counted as 1 ms). ``optional``: a missing or null field is None."""
    v = b.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:  # int compared exactly first
        raise BadField(f"{key} must be a number in [{lo:g}, {hi:g}], got {_show(v)}")
    return float(v)


def text_field(b: dict, key: str, max_len: int, *, default: str = "") -> str:
    """``b[key]`` as a string of at most ``max_len`` characters; missing or null -> ``default``."""
    v = b.get(key)
    if v is None:
        return default
    if not isinstance(v, str) or len(v) > max_len:
        raise BadField(f"{key} must be a string of at most {max_len} characters, got {_show(v)}")
    return v


def create_app(store, study: dict | None = None, *, test_mode: bool = False, admin_token: str | None = None,
               rate_per_s: int = RATE_PER_S):
    """``study``: a validated config to pin into ``store`` (None: the store's pinned config or the defaults).
    ``rate_per_s``: requests per second per token (tests that drive many requests through one token raise it)."""
    try:
        from fastapi import FastAPI, Request
        from fastapi.responses import FileResponse, JSONResponse, Response
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the participant app needs fastapi: pip install 'agentmill[serve]'") from e

    if study is not None:
        store.pin_study(study)
    study = store.study()
    admin_token = admin_token or os.environ.get("AUTOCOG_ADMIN_TOKEN") or secrets.token_urlsafe(16)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.admin_token = admin_token
    app.state.faults = {"trials": 0}
    hits: dict[str, deque] = defaultdict(deque)
    # a response time or a focus loss cannot outlast the token it was measured under
    max_ms = float(study["token_ttl_hours"]) * 3_600_000

    def gate(scope):
        """The early answer for a request (413 / 429 / injected 503), or None to let it through."""
        cl = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if cl is not None and (not cl.isdigit() or int(cl) > MAX_BODY_BYTES):
            return _too_large() if cl.isdigit() else JSONResponse({"detail": "bad content-length"}, status_code=400)
        parts = scope["path"].split("/")
        if len(parts) > 3 and parts[1] == "api" and parts[2] == "s":
            now = time.monotonic()
            if len(hits) > 10_000:  # every distinct (even unknown) token leaves an entry: drop the idle ones
                for k in [k for k, q in hits.items() if not q or now - q[-1] > 1.0]:
                    del hits[k]
            q = hits[parts[3]]
            while q and now - q[0] > 1.0:
                q.popleft()
            if len(q) >= rate_per_s:
                return JSONResponse({"detail": "rate limited"}, status_code=429)
            q.append(now)
            if test_mode and scope["method"] == "PUT" and app.state.faults["trials"] > 0:
                app.state.faults["trials"] -= 1
                return JSONResponse({"detail": "injected fault"}, status_code=503)
        return None

    app.add_middleware(Harden, gate=gate)

    @app.exception_handler(BadField)
    async def bad_field(request: Request, exc: BadField):
        return JSONResponse({"detail": str(exc)}, status_code=422)

    def _sess(token: str):
        return store.session(token)

    async def _json(request: Request) -> dict:
        """The body as a JSON object, or ``BadField`` (-> 422); the middleware has already capped its size."""
        return parse_body(await request.body())

    @app.get("/favicon.ico")
    def favicon():
        return Response(status_code=204)

    @app.get("/s/{token}")
    def page(token: str):
        if _sess(token) is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/{name}")
    def static(name: str):
        if name not in ("task.js", "task.css"):
            return JSONResponse(NOT_FOUND, status_code=404)
        return FileResponse(STATIC / name, media_type="text/javascript" if name.endswith(".js") else "text/css")

    @app.get("/api/s/{token}")
    def bootstrap(token: str):
        s = _sess(token)
        if s is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        design = store.design(s["obs_id"])
        sched = json.loads(s["schedule_json"])
        return {"status": s["status"], "title": study["title"], "consent_text": study["consent_text"],
                "consent_version": study["consent_version"], "instructions": study["instructions"],
                "keys": study["keys"], "validities": design["validities"], "rating_max": design["rating_max"],
                "schedule": [{k: t[k] for k in ("trial_idx", "a", "b", "side_a")} for t in sched],
                "acked": store.acked(s["session_id"]), "completion_code": s["completion_code"],
                "quiz": study["quiz"], "min_rt_ms": study["min_rt_ms"]}

    @app.post("/api/s/{token}/consent")
    async def consent(token: str, request: Request):
        s = _sess(token)
        if s is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        b = await _json(request)
        if not isinstance(b.get("agree"), bool):
            return JSONResponse({"detail": "agree (bool) required"}, status_code=422)
        # a bot fills the hidden honeypot with anything; a non-string is refused rather than coerced
        version, honeypot = text_field(b, "consent_version", 200), text_field(b, "honeypot", 10_000)[:200]
        # Store.consent acts only on a new session: a replay answers the stored status and changes nothing
        status = store.consent(s["session_id"], b["agree"], version, honeypot, _ref(b.get("pid")),
                               _ref(b.get("study_ref")), _ref(b.get("session_ref")))
        return {"status": status}

    @app.post("/api/s/{token}/quiz")
    async def quiz(token: str, request: Request):
        s = _sess(token)
        if s is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        if s["status"] not in ("consented", "in_task"):
            return JSONResponse({"detail": "consent first"}, status_code=403)
        if not study["quiz"]:  # ``quiz: false``: the server, not the client, decides that the quiz is skipped
            return {"status": store.skip_quiz(s["session_id"]), "correct": None}
        if s["status"] != "consented":  # passed already: a replayed quiz counts no attempt and cannot fail it
            return {"status": s["status"], "correct": None}
        b = await _json(request)
        v = store.design(s["obs_id"])["validities"]
        best = b.get("best_expert")
        # a missing or wrong-typed answer is a wrong answer (an attempt); ``true`` is not expert 1
        correct = isinstance(best, int) and not isinstance(best, bool) and \
            best == int(max(range(len(v)), key=lambda i: v[i])) and b.get("left_key") == study["keys"]["left"]
        return {"status": store.quiz(s["session_id"], correct), "correct": correct}

    @app.put("/api/s/{token}/trials/{trial_idx}")
    async def put_trial(token: str, trial_idx: int, request: Request):
        s = _sess(token)
        if s is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        if s["status"] not in ("in_task", "completed"):
            return JSONResponse({"detail": "consent and instructions first"}, status_code=403)
        b = await _json(request)
        n = len(store.schedule(s))
        if not 0 <= trial_idx < n or trial_idx > store.max_acked(s["session_id"]) + 8:
            return JSONResponse({"detail": "bad trial index"}, status_code=422)
        side = b.get("side_pressed")
        if not isinstance(side, str) or side not in ("L", "R"):
            raise BadField(f"side_pressed must be 'L' or 'R', got {_show(side)}")
        rt_ms = number_field(b, "rt_ms", 0, max_ms)
        if rt_ms < study["min_rt_ms"]:  # the client never sends these (its buttons wait min_rt_ms)
            return JSONResponse({"detail": f"rt_ms below the study's min_rt_ms ({study['min_rt_ms']})"},
                                status_code=422)
        client_ts = number_field(b, "client_ts", -1e15, 1e15, optional=True)  # Date.now() is ~1.8e12
        # awaited, not blocking the event loop: other PUTs queue meanwhile and share the next commit's fsync
        res = await asyncio.wrap_future(store.put_trial_future(s, trial_idx, side, rt_ms, client_ts))
        if res == "conflict":
            return JSONResponse({"status": "conflict"}, status_code=409)
        return {"status": res}

    @app.post("/api/s/{token}/events")
    async def events(token: str, request: Request):
        s = _sess(token)
        if s is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        # events describe the task, so none is stored before consent (or after a decline or a failed quiz);
        # the page posts a refresh on every reload, and a 403 is final for it (no retry)
        if s["status"] not in ("consented", "in_task", "completed"):
            return JSONResponse({"detail": "consent first"}, status_code=403)
        b = await _json(request)
        event_id, kind = b.get("event_id"), b.get("kind")
        if not isinstance(event_id, str) or not 0 < len(event_id) <= 64:
            raise BadField(f"event_id must be a string of 1 to 64 characters, got {_show(event_id)}")
        if not isinstance(kind, str) or kind not in ("refresh", "blur", "focus"):
            raise BadField(f"kind must be 'refresh', 'blur' or 'focus', got {_show(kind)}")
        payload = b.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise BadField(f"payload must be an object, got {_show(payload)}")
        # only what the analysis reads is stored: a blur's duration (>= 0: a negative one once erased a
        # participant's own focus-loss total), nothing for the other kinds
        clean = {"ms": int(number_field(payload or {}, "ms", 0, max_ms))} if kind == "blur" else {}
        new = store.event(s["session_id"], event_id, kind, clean)
        if new is None:
            return JSONResponse({"detail": f"event limit reached ({store.MAX_EVENTS} per session)"}, status_code=403)
        return {"new": new}

    @app.post("/api/s/{token}/complete")
    def complete(token: str):
        s = _sess(token)
        if s is None:
            return JSONResponse(NOT_FOUND, status_code=404)
        code = store.complete(s)
        if code is None:
            return JSONResponse({"detail": "not all trials stored"}, status_code=409)
        if study["completion_url"]:
            return {"completion_code": study["completion_code"] or code, "completion_url": study["completion_url"]}
        return {"completion_code": study["completion_code"] or code}

    def _admin(request: Request) -> bool:
        return secrets.compare_digest(request.headers.get("authorization", ""), f"Bearer {admin_token}")

    @app.post("/admin/observations")
    async def add_obs(request: Request):
        if not _admin(request):
            return JSONResponse({"detail": "unauthorised"}, status_code=401)
        b = await _json(request)
        try:
            store.add_observation(b["obs_id"], b["design"])
        except (KeyError, TypeError, ValueError) as e:
            return JSONResponse({"detail": str(e)}, status_code=422)
        return {"ok": True}

    @app.post("/admin/sessions")
    def add_sessions(request: Request, obs: str, n: int = 1):
        if not _admin(request):
            return JSONResponse({"detail": "unauthorised"}, status_code=401)
        try:
            toks = store.create_sessions(obs, n)
        except (KeyError, ValueError) as e:  # unknown observation, or beyond max_recruit
            return JSONResponse({"detail": str(e).strip("'\"")}, status_code=422)
        return {"urls": [f"/s/{t}" for t in toks]}

    @app.get("/admin/progress")
    def progress(request: Request):
        if not _admin(request):
            return JSONResponse({"detail": "unauthorised"}, status_code=401)
        out: dict = {}
        for s in store.sessions():
            out.setdefault(s["obs_id"], {}).setdefault(s["status"], 0)
            out[s["obs_id"]][s["status"]] += 1
        return out

    @app.get("/admin/export")
    def export_(request: Request, format: str = "jsonl", include_excluded: bool = True, table: str = "trials"):
        """One table (trials | participants) as CSV or JSONL; raw PIDs only through the CLI's explicit flag."""
        if not _admin(request):
            return JSONResponse({"detail": "unauthorised"}, status_code=401)
        from agentmill.methods.autocog.web.export import PART_FIELDS, TRIAL_FIELDS, rows, to_csv, to_jsonl

        if format not in ("csv", "jsonl") or table not in ("trials", "participants"):
            return JSONResponse({"detail": "format: csv | jsonl; table: trials | participants"}, status_code=422)
        trials, parts = rows(store, include_excluded=include_excluded)
        data, fields = (trials, TRIAL_FIELDS) if table == "trials" else (parts, PART_FIELDS)
        if format == "jsonl":
            return Response(to_jsonl(data), media_type="application/x-ndjson")
        return Response(to_csv(data, fields), media_type="text/csv",
                        headers={"Content-Disposition": f'attachment; filename="{table}.csv"'})

    if test_mode:
        @app.post("/test/faults")
        def faults(trials: int = 0):
            app.state.faults["trials"] = trials
            return app.state.faults

    return app


def _ref(v) -> str | None:
    """A recruiter URL parameter (PROLIFIC_PID / STUDY_ID / SESSION_ID) as sent by the client: a non-empty string
    (cut to 200 characters), else None."""
    return v[:200] if isinstance(v, str) and v else None


def serve(*, db: str, study: str | None = None, host: str = "127.0.0.1", port: int = 8765,
          test_mode: bool = False) -> int:
    """Pin the study config into ``db`` and serve. Bad input (unreadable config, another study pinned in ``db``,
    a non-loopback host without ``ethics_reference``, test mode off loopback) exits 2 before anything is written."""
    import sys

    try:
        import uvicorn
    except ImportError:
        print("serve needs uvicorn: pip install 'agentmill[serve]'", file=sys.stderr)
        return 2
    from agentmill.methods.autocog.web.store import Store
    from agentmill.methods.autocog.web.study import validate_study

    loopback = host in ("127.0.0.1", "localhost", "::1")
    if test_mode and not loopback:
        print("--test-mode is loopback only", file=sys.stderr)
        return 2
    try:
        cfg = load_study_or_pinned(db, study) or validate_study({})
        if not loopback and not cfg["ethics_reference"]:
            raise ValueError(f"refusing to bind {host}: a non-loopback host needs ethics_reference in the study "
                             "config")
        store = Store(db)
        store.pin_study(cfg)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    app = create_app(store, test_mode=test_mode)
    print(f"admin token: {app.state.admin_token}", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return 0


def load_study_or_pinned(db: str | Path, study: str | Path | None) -> dict | None:
    """The ``--study`` YAML if given, else the config pinned in an existing ``db``, else None. Raises ValueError
    (without writing anything) when the YAML is bad or ``db`` is pinned to a different config."""
    import sqlite3

    from agentmill.methods.autocog.web.study import load_study, study_sha256

    cfg = load_study(study) if study else None
    if not Path(db).is_file():
        return cfg
    c = sqlite3.connect(f"file:{Path(db).resolve()}?mode=ro", uri=True)
    try:
        row = c.execute("SELECT value FROM meta WHERE key='study_json'").fetchone()
    except sqlite3.DatabaseError:
        row = None  # a database from before study pinning, or not yet initialised
    finally:
        c.close()
    pinned = json.loads(row[0]) if row else None
    if cfg is not None and pinned is not None and study_sha256(cfg) != study_sha256(pinned):
        raise ValueError(f"{db} is pinned to another study config (sha256 {study_sha256(pinned)[:12]}, given "
                         f"{study_sha256(cfg)[:12]}); use a new database for a changed study")
    return cfg if cfg is not None else pinned
