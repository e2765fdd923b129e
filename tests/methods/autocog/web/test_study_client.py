"""Study-config fields the participant page acts on [R]: ``quiz: false`` skips the quiz (server
decided), ``min_rt_ms`` reaches the client through the bootstrap and faster trials are refused by the server,
``completion_url`` is returned by ``complete`` (the served client redirects to it), and ``PROLIFIC_PID`` /
``STUDY_ID`` / ``SESSION_ID`` are stored only as per-study HMACs. The client's button delay and redirect are checked
only through what the server sends it and the served script, not in a browser."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3

import pytest

from agentmill.methods.autocog.web.export import export
from agentmill.methods.autocog.web.loadtest import U8_DESIGN
from agentmill.methods.autocog.web.store import Store
from agentmill.methods.autocog.web.study import validate_study

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from agentmill.methods.autocog.web.app import create_app  # noqa: E402


def _client(tmp_path, n=1, **cfg):
    st = Store(tmp_path / "s.sqlite")
    st.add_observation("o1", U8_DESIGN)
    app = create_app(st, validate_study({"study_id": "t", **cfg}))
    return st, TestClient(app), st.create_sessions("o1", n)


def test_quiz_false_skips_the_quiz_server_side(tmp_path) -> None:
    st, c, (tok, tok2) = _client(tmp_path, 2, quiz=False)
    with c:
        assert c.get(f"/api/s/{tok}").json()["quiz"] is False
        assert c.post(f"/api/s/{tok}/quiz", json={}).status_code == 403  # still consent first
        assert c.post(f"/api/s/{tok}/consent", json={"agree": True}).json()["status"] == "consented"
        assert c.put(f"/api/s/{tok}/trials/0", json={"side_pressed": "L", "rt_ms": 900}).status_code == 403
        assert c.post(f"/api/s/{tok}/quiz", json={}).json() == {"status": "in_task", "correct": None}
        assert c.put(f"/api/s/{tok}/trials/0", json={"side_pressed": "L", "rt_ms": 900}).status_code == 200
        assert st.session(tok)["quiz_attempts"] == 0
    # default quiz: true: an empty answer is a failed attempt, not a skip
    (tmp_path / "q").mkdir()
    st2, c2, (tok3,) = _client(tmp_path / "q", 1)
    with c2:
        assert c2.get(f"/api/s/{tok3}").json()["quiz"] is True
        c2.post(f"/api/s/{tok3}/consent", json={"agree": True})
        assert c2.post(f"/api/s/{tok3}/quiz", json={}).json() == {"status": "consented", "correct": False}


def test_min_rt_ms_reaches_client_and_server_refuses_faster_trials(tmp_path) -> None:
    st, c, (tok,) = _client(tmp_path, min_rt_ms=300)
    with c:
        assert c.get(f"/api/s/{tok}").json()["min_rt_ms"] == 300
        c.post(f"/api/s/{tok}/consent", json={"agree": True})
        c.post(f"/api/s/{tok}/quiz", json={"best_expert": 0, "left_key": "f"})
        r = c.put(f"/api/s/{tok}/trials/0", json={"side_pressed": "L", "rt_ms": 299.5})
        assert r.status_code == 422 and "min_rt_ms" in r.json()["detail"]
        assert st.count("trials") == 0
        assert c.put(f"/api/s/{tok}/trials/0", json={"side_pressed": "L", "rt_ms": 300}).json()["status"] == "stored"
    js = c.get("/static/task.js").text  # the served client waits min_rt_ms before accepting a response
    assert "performance.now() - shownAt < boot.min_rt_ms" in js and "setTimeout(() => setButtons(true)" in js


def test_completion_url_returned_and_client_redirects(tmp_path) -> None:
    st, c, (tok,) = _client(tmp_path, completion_url="https://example.org/done?cc=ABC")
    with c:
        c.post(f"/api/s/{tok}/consent", json={"agree": True})
        c.post(f"/api/s/{tok}/quiz", json={"best_expert": 0, "left_key": "f"})
        n = len(c.get(f"/api/s/{tok}").json()["schedule"])
        for k in range(n):
            st.put_trial(st.session(tok), k, "L", 900.0, None)  # in process: the HTTP rate limit is not under test
        j = c.post(f"/api/s/{tok}/complete").json()
        assert j["completion_url"] == "https://example.org/done?cc=ABC" and j["completion_code"].startswith("C")
        assert "location.assign(j.completion_url)" in c.get("/static/task.js").text


def test_url_ids_stored_as_per_study_hmacs(tmp_path) -> None:
    st, c, (tok, tok2) = _client(tmp_path, 2, store_raw_pid=True)
    with c:
        body = {"agree": True, "pid": "PID-1", "study_ref": "STUDY-7", "session_ref": "SESS-9"}
        assert c.post(f"/api/s/{tok}/consent", json=body).status_code == 200
        # non-string IDs are ignored, not a server error
        assert c.post(f"/api/s/{tok2}/consent", json={"agree": True, "pid": 5, "study_ref": ["x"]}).status_code == 200
    s = st.session(tok)

    def h(v):
        return hmac.new(st.secret, v.encode(), hashlib.sha256).hexdigest()
    assert (s["pid_hmac"], s["study_ref_hmac"], s["session_ref_hmac"]) == (h("PID-1"), h("STUDY-7"), h("SESS-9"))
    s2 = st.session(tok2)
    assert s2["pid_hmac"] is s2["study_ref_hmac"] is s2["session_ref_hmac"] is None
    assert st.raw_pids() == {s["session_id"]: "PID-1"}  # only the PID is ever kept raw
    for p in export(st, tmp_path / "e", fmt="csv"):
        assert not any(x in p.read_text() for x in ("PID-1", "STUDY-7", "SESS-9"))


def test_old_database_gains_id_columns(tmp_path) -> None:
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE sessions(session_id TEXT PRIMARY KEY, token_sha256 TEXT UNIQUE NOT NULL, "
                    "obs_id TEXT NOT NULL, schedule_json TEXT NOT NULL, status TEXT NOT NULL, created REAL, "
                    "consented REAL, completed REAL, consent_version TEXT, pid_hmac TEXT, refresh_count INTEGER "
                    "DEFAULT 0, focus_loss_count INTEGER DEFAULT 0, blur_ms INTEGER DEFAULT 0, honeypot TEXT, "
                    "quiz_attempts INTEGER DEFAULT 0, completion_code TEXT)")
    st = Store(db)
    st.add_observation("o1", U8_DESIGN)
    tok = st.create_sessions("o1", 1)[0]
    st.consent(st.session(tok)["session_id"], True, "v1", "", None, "S", None)
    assert st.session(tok)["study_ref_hmac"] and Store(db).session(tok)["session_ref_hmac"] is None
