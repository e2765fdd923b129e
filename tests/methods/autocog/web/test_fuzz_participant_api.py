"""Property-based fuzzing of the participant API (issue 20): whatever body a client sends to consent, quiz, a trial
PUT, an event or complete — random JSON of any type (NaN and infinities written as the literals Python's encoder
emits), the endpoint's own field names holding random values, numbers far out of range, deep nesting, unicode,
invalid UTF-8 — the server answers below 500, and what it stored stays valid: statuses from the flow, counters
>= 0, finite response times, and an export that still parses as strict JSONL. A consent, once given, is never
changed by any later consent body.

Sessions are created per example in the status the endpoint acts on (new, consented, in task), straight through
the ``Store``; the rate limit is raised so that it is not what answers. Budget: ~15 s on 2 cores.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmill.methods.autocog.web.export import rows, to_jsonl
from agentmill.methods.autocog.web.loadtest import U8_DESIGN
from agentmill.methods.autocog.web.store import Store
from agentmill.methods.autocog.web.study import validate_study

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from agentmill.methods.autocog.web.app import create_app  # noqa: E402

SETTINGS = settings(max_examples=80, deadline=None, database=None, derandomize=True,  # the same examples in CI
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
STATUSES = {"new", "consented", "declined", "failed_quiz", "in_task", "completed"}

scalars = (st.none() | st.booleans() | st.integers(min_value=-(10 ** 40), max_value=10 ** 40)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30)
           | st.sampled_from(["L", "R", "blur", "focus", "refresh", "v1", "f", "j", "", "\u202e\x00\ud7ff",
                             "\ud800", "a\udfffb"]))  # lone surrogates: JSON escapes that are not text
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=16)
FIELDS = {
    "consent": ("agree", "consent_version", "honeypot", "pid", "study_ref", "session_ref"),
    "quiz": ("best_expert", "left_key"),
    "trial": ("side_pressed", "rt_ms", "client_ts", "page_load_id"),
    "events": ("event_id", "kind", "payload"),
    "complete": (),
}
NUMBERS = (st.integers(min_value=-(10 ** 40), max_value=10 ** 40) | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from([0, -0.0, -1, 1e-300, 900, 86_400_000, 86_400_001, 2 ** 63, True, False,
                              math.nan, math.inf, -math.inf, 1e308]))
PLAUSIBLE = {  # values near what the page sends, so examples get past the first check into the later ones
    "agree": st.booleans(), "consent_version": st.text(max_size=20), "honeypot": st.text(max_size=20) | scalars,
    "pid": st.text(max_size=20) | scalars, "study_ref": st.text(max_size=20), "session_ref": st.text(max_size=20),
    "best_expert": st.integers(-1, 4) | st.booleans(), "left_key": st.sampled_from(["f", "j", "F"]),
    "side_pressed": st.sampled_from(["L", "R"]), "rt_ms": NUMBERS, "client_ts": NUMBERS | st.none(),
    "page_load_id": st.text(max_size=12), "event_id": st.text(min_size=1, max_size=70) | scalars,
    "kind": st.sampled_from(["refresh", "blur", "focus"]),
    "payload": st.fixed_dictionaries({}, optional={"ms": NUMBERS | json_values, "junk": json_values}),
}


@st.composite
def bodies(draw, endpoint: str) -> bytes:
    """A request body: mostly the endpoint's fields, each usually present and usually plausible, else random JSON
    of any type; otherwise any JSON, or raw bytes a parser must survive."""
    kind = draw(st.integers(0, 9))
    if kind <= 6:
        body = {}
        for f in FIELDS[endpoint]:
            if draw(st.integers(0, 9)) < 9:
                body[f] = draw(PLAUSIBLE[f] if draw(st.integers(0, 9)) < 7 else json_values | NUMBERS)
        return json.dumps(body).encode()  # allow_nan: NaN / Infinity / -Infinity literals
    if kind == 7:
        return json.dumps(draw(json_values)).encode()
    if kind == 8:
        depth = draw(st.integers(1, 8000))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        return opener * depth + (b"]" * depth if opener == b"[" else b"}" * depth)
    return draw(st.binary(max_size=64) | st.sampled_from([b"NaN", b"1e999", b"-" + b"9" * 5000, b'{"rt_ms": 1e400}']))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # tmpfs when there is one: every example commits a few times, and durability is not what is fuzzed here
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="autocog-fuzz-", dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) \
        else tmp_path_factory.mktemp("fuzz")
    st_ = Store(base / "f.sqlite")
    st_.add_observation("o1", U8_DESIGN)
    app = create_app(st_, validate_study({"max_recruit": 100_000, "target_valid_n": 1}), rate_per_s=10 ** 9)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield st_, c
    st_.close()
    shutil.rmtree(base, ignore_errors=True)


def _session_in(store: Store, status: str) -> str:
    tok = store.create_sessions("o1", 1)[0]
    sid = store.session(tok)["session_id"]
    if status != "new":
        store.consent(sid, True, "v1", "", None)
    if status == "in_task":
        store.quiz(sid, True)
    return tok


def _assert_valid(store: Store, tok: str) -> None:
    s = store.session(tok)
    assert s["status"] in STATUSES
    for k in ("blur_ms", "focus_loss_count", "refresh_count", "quiz_attempts"):
        assert isinstance(s[k], int) and s[k] >= 0, (k, s[k])
    assert isinstance(s["honeypot"] or "", str) and isinstance(s["consent_version"] or "", str)
    for t in store.trials(s["session_id"]):
        assert isinstance(t["rt_ms"], float) and math.isfinite(t["rt_ms"]) and t["rt_ms"] >= 0
        assert t["side_pressed"] in ("L", "R")
        assert t["client_ts"] is None or (isinstance(t["client_ts"], float) and math.isfinite(t["client_ts"]))


def _assert_export_is_strict_jsonl(store: Store) -> None:
    def no_constants(name):
        raise AssertionError(f"{name} in the export")
    trials, parts = rows(store)
    for table in (trials, parts):
        for line in to_jsonl(table).splitlines():
            rec = json.loads(line, parse_constant=no_constants)
            assert all(math.isfinite(v) for v in rec.values() if isinstance(v, float))


NATURAL = {"consent": "new", "quiz": "consented", "trial": "in_task", "events": "in_task", "complete": "in_task"}
"""The status each endpoint acts on; three examples in four start there, the rest anywhere in the flow."""


def _accepted_as_sent(endpoint: str, body: bytes, before: dict, after: dict, trials: list[dict]) -> None:
    """An accepted trial or blur stored exactly the real number that was sent (``true`` was once 1 ms, a negative
    blur once lowered the session's focus-loss total)."""
    sent = json.loads(body)
    if endpoint == "trial":
        rt = sent["rt_ms"]
        assert type(rt) in (int, float) and math.isfinite(rt), rt
        assert any(t["rt_ms"] == float(rt) for t in trials)
    if endpoint == "events" and sent["kind"] == "blur":
        ms = sent["payload"]["ms"]
        assert type(ms) in (int, float) and ms >= 0, ms
        assert after["blur_ms"] - before["blur_ms"] == int(ms)


@pytest.mark.parametrize("endpoint", list(FIELDS))
def test_any_body_gets_a_4xx_or_success_and_leaves_valid_state(server, endpoint: str) -> None:
    store, c = server

    @settings(SETTINGS, max_examples=150 if endpoint in ("trial", "events") else 60)
    @given(status=st.sampled_from([NATURAL[endpoint]] * 3 + ["new", "consented", "in_task"]), body=bodies(endpoint),
           trial_idx=st.one_of(*[st.integers(0, 7)] * 3, st.integers(-3, 120), st.just(10 ** 30)))
    def run(status: str, body: bytes, trial_idx: int) -> None:
        tok = _session_in(store, status)
        before = store.session(tok)
        method, path = {"consent": ("POST", "/consent"), "quiz": ("POST", "/quiz"),
                        "trial": ("PUT", f"/trials/{trial_idx}"), "events": ("POST", "/events"),
                        "complete": ("POST", "/complete")}[endpoint]
        r = c.request(method, f"/api/s/{tok}{path}", content=body, headers={"content-type": "application/json"})
        assert r.status_code < 500, (r.status_code, r.text[:200], body[:200])
        if r.status_code >= 400:
            assert isinstance(r.json()["detail"], (str, list))  # a message, not a traceback
        _assert_valid(store, tok)
        if r.status_code == 200 and r.json() in ({"status": "stored"}, {"new": True}):
            _accepted_as_sent(endpoint, body, before, store.session(tok), store.trials(before["session_id"]))

    run()
    _assert_export_is_strict_jsonl(store)


def test_trial_numbers(server) -> None:
    """The trial PUT's numbers alone, in a session that accepts trials: any value is a 422 or stored as sent."""
    store, c = server

    @settings(SETTINGS, max_examples=100)
    @given(side=st.sampled_from(["L", "R"]), rt=NUMBERS | json_values, client_ts=NUMBERS | st.none() | json_values)
    def run(side: str, rt, client_ts) -> None:
        tok = _session_in(store, "in_task")
        body = json.dumps({"side_pressed": side, "rt_ms": rt, "client_ts": client_ts}).encode()
        r = c.put(f"/api/s/{tok}/trials/0", content=body, headers={"content-type": "application/json"})
        assert r.status_code in (200, 422), (r.status_code, r.text[:200], body[:200])
        _assert_valid(store, tok)
        if r.status_code == 200:
            _accepted_as_sent("trial", body, {}, {}, store.trials(store.session(tok)["session_id"]))

    run()
    _assert_export_is_strict_jsonl(store)


def test_blur_numbers(server) -> None:
    """A blur event's ``ms`` alone: any value is a 422 or added, as sent, to a total that never decreases."""
    store, c = server

    @settings(SETTINGS, max_examples=100)
    @given(ms=NUMBERS | json_values)
    def run(ms) -> None:
        tok = _session_in(store, "in_task")
        before = store.session(tok)
        body = json.dumps({"event_id": "b", "kind": "blur", "payload": {"ms": ms}}).encode()
        r = c.post(f"/api/s/{tok}/events", content=body, headers={"content-type": "application/json"})
        assert r.status_code in (200, 422), (r.status_code, r.text[:200], body[:200])
        _assert_valid(store, tok)
        if r.status_code == 200:
            _accepted_as_sent("events", body, before, store.session(tok), [])

    run()


def test_consent_once_given_is_never_changed(server) -> None:
    store, c = server

    @SETTINGS
    @given(first=st.fixed_dictionaries({"agree": st.booleans(), "consent_version": st.text(max_size=20),
                                        "honeypot": st.text(max_size=20), "pid": st.text(max_size=20) | st.none()}),
           replays=st.lists(bodies("consent"), min_size=1, max_size=3))
    def run(first: dict, replays: list[bytes]) -> None:
        tok = _session_in(store, "new")
        r = c.post(f"/api/s/{tok}/consent", json=first)
        assert r.status_code == 200 and r.json()["status"] == ("consented" if first["agree"] else "declined")
        stored = store.session(tok)
        assert stored["honeypot"] == first["honeypot"][:200] and stored["consent_version"] == first["consent_version"]
        for body in replays:
            r = c.post(f"/api/s/{tok}/consent", content=body, headers={"content-type": "application/json"})
            assert r.status_code < 500
            assert store.session(tok) == stored

    run()
