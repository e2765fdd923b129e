"""Study config [R]: validation, pinning, token TTL, per-study HMAC secret, max_recruit, raw PIDs
only on request, and the admin CSV export over HTTP on loopback."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time

import httpx
import pytest

from agentmill.methods.autocog.web.export import export, read_csv_trials
from agentmill.methods.autocog.web.loadtest import U8_DESIGN, free_port, prepare, start_server
from agentmill.methods.autocog.web.store import Store
from agentmill.methods.autocog.web.study import StudyCohort, load_study, study_sha256, validate_study


def test_validate_defaults_and_errors(tmp_path) -> None:
    d = validate_study(None)
    assert d["target_valid_n"] == 25 and d["max_recruit"] == 35 and d["token_ttl_hours"] == 24
    assert d["exclusion"]["catch_min_correct"] == 3 and d["store_raw_pid"] is False
    for bad, field in (({"max_recruit": 10}, "max_recruit"), ({"token_ttl_hours": 0}, "token_ttl_hours"),
                       ({"keys": {"left": "f", "right": "f"}}, "keys"), ({"exclusion": {"single_sid": 1}}, "single_sid"),
                       ({"colour": "red"}, "colour"), ({"quiz": "yes"}, "quiz"),
                       ({"completion_code": "X", "completion_url": "https://e.org"}, "completion_url"),
                       ({"exclusion": {"catch_min_correct": 5}}, "catch_min_correct")):
        with pytest.raises(ValueError, match=field):
            validate_study(bad)
    p = tmp_path / "s.yaml"
    p.write_text("study_id: s1\ntarget_valid_n: 2\nmax_recruit: 3\nexclusion:\n  min_mean_rt_ms: 500\n")
    cfg = load_study(p)
    assert cfg["exclusion"]["min_mean_rt_ms"] == 500 and cfg["exclusion"]["single_side"] == 0.95
    assert study_sha256(cfg) == study_sha256(load_study(p)) != study_sha256(validate_study({"study_id": "s2"}))
    p.write_text("study_id: [unclosed\n")
    with pytest.raises(ValueError, match="not YAML"):
        load_study(p)
    with pytest.raises(ValueError, match="no such file"):
        load_study(tmp_path / "missing.yaml")


def test_pin_ttl_recruit_hmac_and_raw_pids(tmp_path) -> None:
    cfg = validate_study({"study_id": "s1", "target_valid_n": 2, "max_recruit": 3, "token_ttl_hours": 1,
                          "store_raw_pid": True})
    st = Store(tmp_path / "a.sqlite")
    h = st.pin_study(cfg)
    assert st.pin_study(cfg) == h and st.pinned_study() == cfg
    with pytest.raises(ValueError, match="another study config"):
        st.pin_study(validate_study({"study_id": "s2"}))
    assert StudyCohort(st, cfg).describe()["study_sha256"] == h
    st.add_observation("o1", U8_DESIGN)
    toks = st.create_sessions("o1", 3)
    with pytest.raises(ValueError, match="max_recruit"):
        st.create_sessions("o1", 1)
    # TTL: a token older than token_ttl_hours is unknown
    sid = st.session(toks[0])["session_id"]
    with sqlite3.connect(st.path) as c:
        c.execute("UPDATE sessions SET created=? WHERE session_id=?", (time.time() - 3601, sid))
    assert st.session(toks[0]) is None and st.session(toks[1]) is not None
    # per-study HMAC: the same PID hashes differently in another study database
    other = Store(tmp_path / "b.sqlite")
    assert other.secret != st.secret and Store(st.path).secret == st.secret  # persisted with its database
    s1 = st.session(toks[1])
    st.consent(s1["session_id"], True, "v1", "", "PID-123")
    other.pin_study(cfg)
    other.add_observation("o1", U8_DESIGN)
    s2 = other.session(other.create_sessions("o1", 1)[0])
    other.consent(s2["session_id"], True, "v1", "", "PID-123")
    h1, h2 = st.session(toks[1])["pid_hmac"], other.sessions()[0]["pid_hmac"]
    assert h1 and h2 and h1 != h2 and "PID-123" not in h1
    assert st.raw_pids() == {s1["session_id"]: "PID-123"}
    # raw PIDs leave the database only on request
    plain = export(st, tmp_path / "e1", fmt="csv")
    assert [p.name for p in plain] == ["trials.csv", "participants.csv", "loop.jsonl"]
    assert all("PID-123" not in p.read_text() for p in plain)
    withpid = export(st, tmp_path / "e2", fmt="csv", include_raw_pids=True)
    assert (tmp_path / "e2" / "raw_pids.csv") in withpid
    assert "p002,PID-123" in (tmp_path / "e2" / "raw_pids.csv").read_text()
    # default study: no raw PID stored at all
    d = Store(tmp_path / "c.sqlite")
    d.add_observation("o1", U8_DESIGN)
    s3 = d.session(d.create_sessions("o1", 1)[0])
    d.consent(s3["session_id"], True, "v1", "", "PID-9")
    assert d.raw_pids() == {} and d.count("raw_pids") == 0


def test_exclusion_rules_come_from_the_study(tmp_path) -> None:
    from agentmill.methods.autocog.web.exclusion import valid_data

    def db(name, min_rt):
        st = Store(tmp_path / name)
        st.pin_study(validate_study({"study_id": name, "exclusion": {"min_mean_rt_ms": min_rt}}))
        st.add_observation("o1", U8_DESIGN)
        tok = st.create_sessions("o1", 1)[0]
        s = st.session(tok)
        st.consent(s["session_id"], True, "v1", "", None)
        st.quiz(s["session_id"], True)
        s = st.session(tok)
        for t in json.loads(s["schedule_json"]):  # sides LLRR… (no side/alternation flag), dominant on catch trials
            k = t["trial_idx"]
            side = ("L" if (k // 2) % 2 else "R") if not t["is_catch"] else \
                (t["side_a"] if sum(t["a"]) > sum(t["b"]) else ("R" if t["side_a"] == "L" else "L"))
            st.put_trial(s, k, side, 900.0, None)
        assert st.complete(st.session(tok))
        return st
    assert len(valid_data(db("strict.sqlite", 1200), "o1")) == 0  # mean RT 900 < 1200 -> fast_rt
    assert len(valid_data(db("lenient.sqlite", 500), "o1")) == 1


def test_admin_csv_export_and_recruit_cap_over_http(tmp_path, monkeypatch) -> None:
    db = tmp_path / "study.sqlite"
    st = Store(db)
    st.pin_study(validate_study({"study_id": "http", "target_valid_n": 1, "max_recruit": 2,
                                 "completion_url": "https://example.org/done"}))
    st.add_observation("o1", U8_DESIGN)
    monkeypatch.setenv("AUTOCOG_ADMIN_TOKEN", "admintok")
    port = free_port()
    proc = start_server(db, port)
    try:
        auth = {"authorization": "Bearer admintok"}
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}")
        r = c.post("/admin/sessions", params={"obs": "o1", "n": 2}, headers=auth)
        assert r.status_code == 200 and len(r.json()["urls"]) == 2
        tok = r.json()["urls"][0].rsplit("/", 1)[1]
        r = c.post("/admin/sessions", params={"obs": "o1", "n": 1}, headers=auth)
        assert r.status_code == 422 and "max_recruit" in r.json()["detail"]
        assert c.get("/admin/progress", headers=auth).json() == {"o1": {"new": 2}}
        prepare(c, tok)
        for k, side in ((0, "L"), (1, "R")):
            assert c.put(f"/api/s/{tok}/trials/{k}", json={"side_pressed": side, "rt_ms": 1500}).status_code == 200
        assert c.get("/admin/export", params={"format": "csv"}).status_code == 401
        assert c.get("/admin/export", params={"format": "xml"}, headers=auth).status_code == 422
        r = c.get("/admin/export", params={"format": "csv"}, headers=auth)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
        (tmp_path / "t.csv").write_text(r.text)
        got = read_csv_trials(tmp_path / "t.csv")
        assert [(t["participant"], t["trial_idx"], t["side_pressed"]) for t in got] == [("p001", 0, "L"),
                                                                                     ("p001", 1, "R")]
        with sqlite3.connect(db) as con:
            sched = con.execute("SELECT schedule_json FROM sessions ORDER BY created LIMIT 1").fetchone()[0]
        assert got[0]["option_a_ratings"] == json.loads(sched)[0]["a"]
        parts = list(csv.DictReader(io.StringIO(c.get("/admin/export", params={"format": "csv", "table": "participants"},
                                                      headers=auth).text)))
        assert [p["participant"] for p in parts] == ["p001", "p002"] and parts[0]["n_trials"] == "2"
        # token TTL over HTTP: an expired token gets the same 404 body as an unknown one
        with sqlite3.connect(db) as con:
            con.execute("UPDATE sessions SET created=created-25*3600")
        a, b = c.get(f"/api/s/{tok}"), c.get("/api/s/unknown-token")
        assert a.status_code == b.status_code == 404 and a.content == b.content
    finally:
        proc.kill()
        proc.wait()

