"""Hostile input to the participant page (issue 20, findings 3 and 7): a body cap that holds for chunked bodies, no
events before consent, every trial and event field validated (finite, real numbers, not bools, in range), consent
and quiz that cannot be replayed to change stored state. Each test failed on the code before the fix (a 200 for the
chunked body, 500 for NaN, ``true`` stored as 1 ms, a negative blur erasing the focus-loss total, a replayed
consent clearing the honeypot)."""

from __future__ import annotations

import json
import socket

import pytest

from agentmill.methods.autocog.web.export import rows, to_jsonl
from agentmill.methods.autocog.web.loadtest import U8_DESIGN, prepare
from agentmill.methods.autocog.web.store import Store

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from agentmill.methods.autocog.web.app import create_app  # noqa: E402

JSON = {"content-type": "application/json"}


@pytest.fixture()
def app(tmp_path):
    st = Store(tmp_path / "h.sqlite")
    st.add_observation("o1", U8_DESIGN)
    # server exceptions come back as 500s, the way a participant would see them, instead of raising in the test
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        yield st, c
    st.close()


def _strict_jsonl(text: str) -> list[dict]:
    """Parse JSONL the way a strict consumer does: NaN/Infinity are not JSON."""
    def no_constants(name):
        raise ValueError(f"{name} in export")
    return [json.loads(line, parse_constant=no_constants) for line in text.splitlines()]


def test_chunked_body_over_the_cap_is_413_and_stores_nothing(app) -> None:
    st, c = app
    tok = st.create_sessions("o1", 1)[0]
    prepare(c, tok)

    def body():  # no Content-Length: httpx sends it chunked
        yield b'{"event_id": "x", "kind": "refresh", "payload": {"junk": "'
        for _ in range(64):
            yield b"A" * 4096
        yield b'"}}'
    r = c.post(f"/api/s/{tok}/events", content=body(), headers=JSON)
    assert r.status_code == 413 and "16384" in r.json()["detail"]
    assert r.headers["x-content-type-options"] == "nosniff"  # early answers carry the security headers too
    assert st.count("events") == 0


def test_chunked_body_cut_off_by_the_real_server(study) -> None:
    """Through uvicorn, a chunked body is cut at the cap (measured: a 200 MB chunked POST had grown the database
    by 200 MB plus as much WAL; now it answers 413 and the files do not grow)."""
    st, db, port, _proc = study
    tok = st.create_sessions("o1", 1)[0]
    size0 = sum(p.stat().st_size for p in db.parent.iterdir())
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"POST /api/s/{tok}/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n".encode())
        head = b'{"event_id": "x", "kind": "refresh", "payload": {"junk": "'
        s.sendall(b"%x\r\n%s\r\n" % (len(head), head))
        chunk = b"A" * 65536
        try:
            for _ in range(64):  # 4 MB
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            s.sendall(b'3\r\n"}}\r\n0\r\n\r\n')  # a complete, valid event: the old server stored all of it
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close once it has answered
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert st.count("events") == 0
    assert sum(p.stat().st_size for p in db.parent.iterdir()) < size0 + 1_000_000


def test_events_before_consent_are_refused(app) -> None:
    st, c = app
    tok, tok2 = st.create_sessions("o1", 2)
    ev = {"event_id": "refresh-1", "kind": "refresh"}
    assert c.post(f"/api/s/{tok}/events", json=ev).status_code == 403
    c.post(f"/api/s/{tok2}/consent", json={"agree": False})
    assert c.post(f"/api/s/{tok2}/events", json=ev).status_code == 403  # declined: nothing to describe
    assert st.count("events") == 0 and st.session(tok)["refresh_count"] == 0
    c.post(f"/api/s/{tok}/consent", json={"agree": True})
    assert c.post(f"/api/s/{tok}/events", json=ev).json() == {"new": True}  # a reload after consent counts
    assert st.session(tok)["refresh_count"] == 1


@pytest.mark.parametrize("raw, needle", [
    (b'{"side_pressed": "L", "rt_ms": NaN}', "strict JSON"),
    (b'{"side_pressed": "L", "rt_ms": Infinity}', "strict JSON"),
    (b'{"side_pressed": "L", "rt_ms": 1e999}', "out of range"),
    (b'{"side_pressed": "L", "rt_ms": true}', "rt_ms"),
    (b'{"side_pressed": "L", "rt_ms": "900"}', "rt_ms"),
    (b'{"side_pressed": "L", "rt_ms": -5}', "rt_ms"),
    (b'{"side_pressed": "L", "rt_ms": 1' + b"0" * 30 + b"}", "rt_ms"),
    (b'{"side_pressed": "L", "rt_ms": 900, "client_ts": {"a": 1}}', "client_ts"),
    (b'{"side_pressed": "L", "rt_ms": 900, "client_ts": "yesterday"}', "client_ts"),
    (b'{"side_pressed": ["L"], "rt_ms": 900}', "side_pressed"),
    (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
])
def test_bad_trial_fields_are_422_and_store_nothing(app, raw: bytes, needle: str) -> None:
    st, c = app
    tok = st.create_sessions("o1", 1)[0]
    prepare(c, tok)
    r = c.put(f"/api/s/{tok}/trials/0", content=raw, headers=JSON)
    assert r.status_code == 422 and needle in r.json()["detail"], (r.status_code, r.text)
    assert st.count("trials") == 0
    # the export stays strict JSONL (Infinity once made it unparsable)
    assert _strict_jsonl(to_jsonl(rows(st)[0])) == []


def test_a_good_trial_after_bad_ones_is_stored_with_its_real_value(app) -> None:
    st, c = app
    tok = st.create_sessions("o1", 1)[0]
    prepare(c, tok)
    assert c.put(f"/api/s/{tok}/trials/0", json={"side_pressed": "L", "rt_ms": True}).status_code == 422
    r = c.put(f"/api/s/{tok}/trials/0", json={"side_pressed": "L", "rt_ms": 812, "client_ts": 1.7e12})
    assert r.json() == {"status": "stored"}
    (t,) = st.trials(st.session(tok)["session_id"])
    assert t["rt_ms"] == 812.0 and t["client_ts"] == 1.7e12


@pytest.mark.parametrize("payload", [{"ms": -10**9}, {"ms": True}, {"ms": "5"}, {"ms": 1e12}, {}, [1], "x"])
def test_bad_blur_payloads_are_422_and_keep_the_focus_total(app, payload) -> None:
    st, c = app
    tok = st.create_sessions("o1", 1)[0]
    prepare(c, tok)
    assert c.post(f"/api/s/{tok}/events", json={"event_id": "b1", "kind": "blur", "payload": {"ms": 1500}}).json() \
        == {"new": True}
    r = c.post(f"/api/s/{tok}/events", json={"event_id": "b2", "kind": "blur", "payload": payload})
    assert r.status_code == 422
    s = st.session(tok)
    assert (s["blur_ms"], s["focus_loss_count"]) == (1500, 1) and st.count("events") == 1


def test_event_fields_and_per_session_cap(app) -> None:
    st, c = app
    tok = st.create_sessions("o1", 1)[0]
    prepare(c, tok)
    for bad in ({"event_id": "", "kind": "refresh"}, {"event_id": "x" * 65, "kind": "refresh"},
                {"event_id": 7, "kind": "refresh"}, {"event_id": "e", "kind": ["blur"]},
                {"event_id": "e", "kind": "refresh", "payload": "x"}):
        assert c.post(f"/api/s/{tok}/events", json=bad).status_code == 422, bad
    # only what the analysis reads is stored: unknown payload keys are dropped
    c.post(f"/api/s/{tok}/events", json={"event_id": "f1", "kind": "focus", "payload": {"junk": "A" * 8000}})
    st.MAX_EVENTS = 3
    for k in range(2, 4):
        assert c.post(f"/api/s/{tok}/events", json={"event_id": f"f{k}", "kind": "focus"}).json() == {"new": True}
    r = c.post(f"/api/s/{tok}/events", json={"event_id": "f4", "kind": "focus"})
    assert r.status_code == 403 and "event limit" in r.json()["detail"]
    assert c.post(f"/api/s/{tok}/events", json={"event_id": "f1", "kind": "focus"}).json() == {"new": False}
    with st._conn() as con:
        assert [r[0] for r in con.execute("SELECT payload FROM events ORDER BY event_id")] == ["{}"] * 3


def test_consent_is_idempotent_and_cannot_be_replayed(app) -> None:
    st, c = app
    tok = st.create_sessions("o1", 1)[0]
    first = {"agree": True, "consent_version": "v1", "honeypot": "i am a bot", "pid": "PID-1"}
    assert c.post(f"/api/s/{tok}/consent", json=first).json() == {"status": "consented"}
    before = st.session(tok)
    for replay in (first, {"agree": True, "consent_version": "v2", "honeypot": "", "pid": "PID-2"},
                   {"agree": False, "honeypot": ""}):
        assert c.post(f"/api/s/{tok}/consent", json=replay).json() == {"status": "consented"}
    assert st.session(tok) == before  # honeypot, consent time, version and PID hash all as first stored
    for bad in ({"agree": 1}, {"agree": True, "honeypot": ["x"]}, {"agree": True, "consent_version": 2}):
        assert c.post(f"/api/s/{tok}/consent", json=bad).status_code == 422, bad


def test_lone_surrogate_escapes_are_422_not_500(app) -> None:
    """``"\\ud800"`` is valid JSON but not text: SQLite cannot store it (it was a 500 on consent and events)."""
    st, c = app
    tok, tok2 = st.create_sessions("o1", 2)
    r = c.post(f"/api/s/{tok}/consent", content=b'{"agree": true, "honeypot": "\\ud800"}', headers=JSON)
    assert r.status_code == 422 and "surrogate" in r.json()["detail"]
    prepare(c, tok2)
    r = c.post(f"/api/s/{tok2}/events", content=b'{"event_id": "a\\udfff", "kind": "refresh"}', headers=JSON)
    assert r.status_code == 422 and st.count("events") == 0


def test_quiz_replay_during_the_task_changes_nothing(app) -> None:
    st, c = app
    tok, tok2 = st.create_sessions("o1", 2)
    prepare(c, tok)
    wrong = {"best_expert": 3, "left_key": "j"}
    for _ in range(3):
        assert c.post(f"/api/s/{tok}/quiz", json=wrong).json() == {"status": "in_task", "correct": None}
    assert st.session(tok)["quiz_attempts"] == 1
    c.post(f"/api/s/{tok2}/consent", json={"agree": True})
    # U8's best expert is 0, so ``false`` (== 0 in Python) must not pass as the answer
    assert c.post(f"/api/s/{tok2}/quiz", json={"best_expert": False, "left_key": "f"}).json()["correct"] is False
