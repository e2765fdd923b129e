"""SQLite storage for the participant app [R]: WAL, synchronous=FULL, idempotent trial writes.

One database holds one study: its validated config is pinned in ``meta`` (with its SHA-256) and a per-study HMAC
secret (``secrets.token_hex(32)``, created with the database, never exported) keys the participant-ID hashes and
completion codes. The pinned config sets the token lifetime (``token_ttl_hours``: an expired token is treated as
unknown), the recruitment cap per observation (``max_recruit``), the catch-trial count and the exclusion rules.

A trial PUT is ``INSERT … ON CONFLICT DO NOTHING`` followed by a comparison with the stored row: identical ->
duplicate (200), different -> conflict (409, the attempt is logged in ``conflicts``; first write wins). Every write
commits before the response is sent, so an acknowledged trial survives a server kill. Tokens are
``secrets.token_urlsafe(16)``; only their SHA-256 is stored.

Connections are long-lived, one per thread (opening one per call cost a second fsync per write, and closing the
last one a checkpoint). Trial writes go through a ``GroupCommitter`` (``web/group_commit.py``): concurrent PUTs
share one transaction and one fsync, and each is answered only after that commit, so durability per acknowledged
trial is unchanged while throughput is no longer capped at 1 / fsync latency (e176.perf P4).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.methods.autocog.web.group_commit import GroupCommitter

SCHEMA = """
CREATE TABLE IF NOT EXISTS observations(obs_id TEXT PRIMARY KEY, design_json TEXT NOT NULL, design_hash TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'open');
CREATE TABLE IF NOT EXISTS sessions(session_id TEXT PRIMARY KEY, token_sha256 TEXT UNIQUE NOT NULL, obs_id TEXT NOT NULL,
  schedule_json TEXT NOT NULL, status TEXT NOT NULL, created REAL, consented REAL, completed REAL,
  consent_version TEXT, pid_hmac TEXT, refresh_count INTEGER DEFAULT 0, focus_loss_count INTEGER DEFAULT 0,
  blur_ms INTEGER DEFAULT 0, honeypot TEXT, quiz_attempts INTEGER DEFAULT 0, completion_code TEXT,
  study_ref_hmac TEXT, session_ref_hmac TEXT);
CREATE TABLE IF NOT EXISTS trials(session_id TEXT NOT NULL, trial_idx INTEGER NOT NULL, pair_idx INTEGER NOT NULL,
  is_catch INTEGER NOT NULL, a_json TEXT NOT NULL, b_json TEXT NOT NULL, side_a TEXT NOT NULL, side_pressed TEXT NOT NULL,
  response_option INTEGER NOT NULL, rt_ms REAL NOT NULL, client_ts REAL, server_ts REAL NOT NULL,
  PRIMARY KEY(session_id, trial_idx));
CREATE TABLE IF NOT EXISTS events(session_id TEXT NOT NULL, event_id TEXT NOT NULL, kind TEXT NOT NULL, payload TEXT,
  ts REAL, PRIMARY KEY(session_id, event_id));
CREATE TABLE IF NOT EXISTS conflicts(session_id TEXT, trial_idx INTEGER, payload TEXT, ts REAL);
CREATE TABLE IF NOT EXISTS raw_pids(session_id TEXT PRIMARY KEY, pid TEXT);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def build_schedule(design: dict, seed: int, n_catch: int = 4) -> list[dict]:
    """Server-side schedule: the design's pairs replicated K times, shuffled; A's screen side balanced per pair
    (alternating over repeats, random start); catch (dominance) trials at 20/40/60/80% of the session."""
    from agentmill.methods.autocog.design import Design, catch_pairs

    d = Design.from_json(design)
    rng = np.random.default_rng(seed)
    idx = d.schedules(rng, 1)[0]
    start = rng.integers(0, 2, d.n_unique)
    seen = np.zeros(d.n_unique, int)
    trials = []
    for p in idx:
        side = "L" if (start[p] + seen[p]) % 2 == 0 else "R"
        seen[p] += 1
        trials.append({"pair_idx": int(p), "is_catch": False, "a": list(d.pairs_a[p]), "b": list(d.pairs_b[p]),
                       "side_a": side})
    catches = catch_pairs(d.n_features, d.rating_max, n_catch)
    n = len(trials) + n_catch
    for k, (a, b) in enumerate(catches):
        pos = int(round(n * (k + 1) / (n_catch + 1)))
        trials.insert(min(pos, len(trials)), {"pair_idx": -1, "is_catch": True, "a": list(a), "b": list(b),
                                              "side_a": "L" if rng.random() < 0.5 else "R"})
    for i, t in enumerate(trials):
        t["trial_idx"] = i
    return trials


class Store:
    MAX_EVENTS = 1000
    """Page events stored per session: the page sends one per reload and one per tab switch (a dozen in a normal
    session), so this only stops a token from filling the disk 16 KB at a time."""

    def __init__(self, path: str | Path, *, secret: str | None = None) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._writer = GroupCommitter(self._connect)
        self._schedules: dict[str, list[dict]] = {}
        with self._conn() as c:
            c.executescript(SCHEMA)
            have = {r[1] for r in c.execute("PRAGMA table_info(sessions)")}
            for col in ("study_ref_hmac", "session_ref_hmac"):  # databases created before these columns
                if col not in have:
                    c.execute(f"ALTER TABLE sessions ADD COLUMN {col} TEXT")
            c.execute("INSERT INTO meta VALUES ('hmac_secret', ?) ON CONFLICT DO NOTHING", (secrets.token_hex(32),))
            stored = c.execute("SELECT value FROM meta WHERE key='hmac_secret'").fetchone()[0]
        self.secret = (secret or stored).encode()
        self._study: dict | None = None

    # -- study config -----------------------------------------------------------------------------------------
    def pin_study(self, cfg: dict) -> str:
        """Pin a validated study config (``web.study.validate_study``) into the database; returns its SHA-256.
        Re-pinning the same config is a no-op; a different one raises ValueError (one database, one study)."""
        from agentmill.methods.autocog.web.study import study_sha256

        h = study_sha256(cfg)
        with self._conn() as c:
            c.execute("INSERT INTO meta VALUES ('study_sha256', ?) ON CONFLICT DO NOTHING", (h,))
            old = c.execute("SELECT value FROM meta WHERE key='study_sha256'").fetchone()[0]
            if old != h:
                raise ValueError(f"{self.path} is pinned to another study config (sha256 {old[:12]}, given "
                                 f"{h[:12]}); use a new database for a changed study")
            c.execute("INSERT INTO meta VALUES ('study_json', ?) ON CONFLICT DO NOTHING", (json.dumps(cfg),))
        self._study = None
        return h

    def pinned_study(self) -> dict | None:
        """The pinned config, or None when none was pinned yet."""
        with self._conn() as c:
            row = c.execute("SELECT value FROM meta WHERE key='study_json'").fetchone()
        return json.loads(row[0]) if row else None

    def study(self) -> dict:
        """The pinned config, else the defaults (cached per Store object)."""
        if self._study is None:
            from agentmill.methods.autocog.web.study import validate_study

            self._study = self.pinned_study() or validate_study({})
        return self._study

    def _connect(self) -> sqlite3.Connection:
        c = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        c.execute("PRAGMA busy_timeout=5000")
        c.row_factory = sqlite3.Row
        return c

    def _conn(self) -> sqlite3.Connection:
        """This thread's long-lived connection (autocommit: each statement outside BEGIN commits durably)."""
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = self._connect()
        return c

    def close(self) -> None:
        """Commit queued trial writes, stop the writer thread, close this thread's connection."""
        self._writer.close()
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    # -- admin ------------------------------------------------------------------------------------------------
    def add_observation(self, obs_id: str, design: dict) -> None:
        from agentmill.methods.autocog.design import Design

        d = Design.from_json(design)  # validates
        with self._conn() as c:
            c.execute("INSERT INTO observations(obs_id, design_json, design_hash) VALUES (?,?,?) "
                      "ON CONFLICT DO NOTHING", (obs_id, json.dumps(design), d.content_id()))

    def create_sessions(self, obs_id: str, n: int) -> list[str]:
        """``n`` new participant tokens for ``obs_id``; ValueError beyond the study's ``max_recruit`` sessions per
        observation (every session counts, declined and excluded ones included, as recruited people do)."""
        study = self.study()
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        with self._conn() as c:
            row = c.execute("SELECT design_json FROM observations WHERE obs_id=?", (obs_id,)).fetchone()
            if row is None:
                raise KeyError(f"unknown observation {obs_id!r}")
            have = c.execute("SELECT COUNT(*) FROM sessions WHERE obs_id=?", (obs_id,)).fetchone()[0]
            if have + n > study["max_recruit"]:
                raise ValueError(f"max_recruit: observation {obs_id!r} has {have} sessions; {n} more would exceed "
                                 f"max_recruit = {study['max_recruit']} of the study config")
            toks = []
            for _ in range(n):
                tok = secrets.token_urlsafe(16)
                sid = secrets.token_hex(8)
                sched = build_schedule(json.loads(row["design_json"]), derive_seed(obs_id, sid), study["n_catch"])
                c.execute("INSERT INTO sessions(session_id, token_sha256, obs_id, schedule_json, status, created) "
                          "VALUES (?,?,?,?,?,?)", (sid, token_hash(tok), obs_id, json.dumps(sched), "new", time.time()))
                toks.append(tok)
            return toks

    # -- participant ------------------------------------------------------------------------------------------
    def session(self, token: str) -> dict | None:
        """The session of a token, or None when the token is unknown or older than ``token_ttl_hours``."""
        h = token_hash(token)
        with self._conn() as c:
            row = c.execute("SELECT * FROM sessions WHERE token_sha256=?", (h,)).fetchone()
        if row is None or not hmac.compare_digest(row["token_sha256"], h):
            return None
        if time.time() - row["created"] > self.study()["token_ttl_hours"] * 3600:
            return None
        return dict(row)

    def design(self, obs_id: str) -> dict:
        with self._conn() as c:
            return json.loads(c.execute("SELECT design_json FROM observations WHERE obs_id=?",
                                        (obs_id,)).fetchone()["design_json"])

    def schedule(self, sess: dict) -> list[dict]:
        """The session's parsed schedule (fixed at creation, so parsed once per session and process)."""
        sid = sess["session_id"]
        sched = self._schedules.get(sid)
        if sched is None:
            if len(self._schedules) >= 4096:
                self._schedules.clear()
            sched = self._schedules[sid] = json.loads(sess["schedule_json"])
        return sched

    def max_acked(self, sid: str) -> int:
        """Highest stored trial index of the session, -1 when none."""
        row = self._conn().execute("SELECT MAX(trial_idx) FROM trials WHERE session_id=?", (sid,)).fetchone()
        return -1 if row[0] is None else int(row[0])

    def acked(self, sid: str) -> list[int]:
        with self._conn() as c:
            return [r[0] for r in c.execute("SELECT trial_idx FROM trials WHERE session_id=? ORDER BY trial_idx",
                                            (sid,))]

    def _hmac(self, value: str | None) -> str | None:
        """HMAC-SHA256 of a participant-side ID under the per-study secret (None for a missing ID)."""
        return hmac.new(self.secret, value.encode(), hashlib.sha256).hexdigest() if value else None

    def consent(self, sid: str, agree: bool, version: str, honeypot: str, pid: str | None,
                study_ref: str | None = None, session_ref: str | None = None) -> str:
        """Record consent (or decline) once; returns the session's status. ``pid``, ``study_ref``,
        ``session_ref``: the recruiter's ``PROLIFIC_PID``, ``STUDY_ID`` and ``SESSION_ID`` URL parameters, stored
        only as per-study HMACs; the raw PID additionally, in ``raw_pids``, under ``store_raw_pid: true``.

        Only a ``new`` session changes: a repeated consent (a double click, a retried request) answers the stored
        status and writes nothing, so a replay can neither clear the honeypot a bot filled in nor move the consent
        time, version or IDs."""
        status = "consented" if agree else "declined"
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")  # the status test and the raw-PID insert belong to one decision
            try:
                cur = c.execute("UPDATE sessions SET status=?, consented=?, consent_version=?, honeypot=?, "
                                "pid_hmac=?, study_ref_hmac=?, session_ref_hmac=? WHERE session_id=? AND status='new'",
                                (status, time.time(), version, honeypot or "", self._hmac(pid), self._hmac(study_ref),
                                 self._hmac(session_ref), sid))
                if cur.rowcount == 1 and pid and self.study()["store_raw_pid"]:  # separate table; exports skip it
                    c.execute("INSERT INTO raw_pids VALUES (?,?) ON CONFLICT DO NOTHING", (sid, pid[:200]))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return c.execute("SELECT status FROM sessions WHERE session_id=?", (sid,)).fetchone()[0]

    def quiz(self, sid: str, correct: bool) -> str:
        """One quiz attempt of a ``consented`` session (two wrong ones fail it); any other status is returned
        unchanged, so a quiz replayed during the task can neither count attempts nor fail the session."""
        with self._conn() as c:
            cur = c.execute("UPDATE sessions SET quiz_attempts=quiz_attempts+1 WHERE session_id=? "
                            "AND status='consented'", (sid,))
            if cur.rowcount == 1:
                n = c.execute("SELECT quiz_attempts FROM sessions WHERE session_id=?", (sid,)).fetchone()[0]
                if correct:
                    c.execute("UPDATE sessions SET status='in_task' WHERE session_id=? AND status='consented'", (sid,))
                elif n >= 2:
                    c.execute("UPDATE sessions SET status='failed_quiz' WHERE session_id=? AND status='consented'",
                              (sid,))
            return c.execute("SELECT status FROM sessions WHERE session_id=?", (sid,)).fetchone()[0]

    def skip_quiz(self, sid: str) -> str:
        """A study with ``quiz: false``: a consented session goes straight to the task (no attempt counted)."""
        with self._conn() as c:
            c.execute("UPDATE sessions SET status='in_task' WHERE session_id=? AND status='consented'", (sid,))
            return c.execute("SELECT status FROM sessions WHERE session_id=?", (sid,)).fetchone()[0]

    def put_trial(self, sess: dict, idx: int, side_pressed: str, rt_ms: float, client_ts: float | None) -> str:
        """'stored' | 'duplicate' | 'conflict', returned once the write is durable. The response option is derived
        from the stored side_a."""
        return self.put_trial_future(sess, idx, side_pressed, rt_ms, client_ts).result()

    def put_trial_future(self, sess: dict, idx: int, side_pressed: str, rt_ms: float,
                         client_ts: float | None) -> Future:
        """``put_trial`` through the group committer: a Future resolved with its result only after the commit
        (one fsync, shared with the PUTs queued beside it) that made the trial durable."""
        t = self.schedule(sess)[idx]
        resp = 0 if side_pressed == t["side_a"] else 1
        row = (sess["session_id"], idx, t["pair_idx"], int(t["is_catch"]), json.dumps(t["a"]), json.dumps(t["b"]),
               t["side_a"], side_pressed, resp, float(rt_ms), client_ts, time.time())
        return self._writer.submit(lambda c: _write_trial(c, row, rt_ms))

    def event(self, sid: str, event_id: str, kind: str, payload: dict) -> bool | None:
        """Log a page event once per ``event_id``: True when new, False for a repeat, None when the session
        already holds ``MAX_EVENTS`` (the body cap bounds one event; this bounds how many one token can store).
        ``payload`` is the validated one (``{"ms": int >= 0}`` for a blur): a negative ``ms`` would subtract
        from the session's focus-loss total."""
        ms = int(payload.get("ms", 0)) if kind == "blur" else 0
        if ms < 0:
            raise ValueError(f"blur ms must be >= 0, got {ms}")
        with self._conn() as c:
            if c.execute("SELECT 1 FROM events WHERE session_id=? AND event_id=?", (sid, event_id)).fetchone():
                return False
            if c.execute("SELECT COUNT(*) FROM events WHERE session_id=?", (sid,)).fetchone()[0] >= self.MAX_EVENTS:
                return None
            cur = c.execute("INSERT INTO events VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                            (sid, event_id, kind, json.dumps(payload), time.time()))
            if cur.rowcount == 1:
                if kind == "refresh":
                    c.execute("UPDATE sessions SET refresh_count=refresh_count+1 WHERE session_id=?", (sid,))
                elif kind == "blur":
                    c.execute("UPDATE sessions SET focus_loss_count=focus_loss_count+1, blur_ms=blur_ms+? "
                              "WHERE session_id=?", (ms, sid))
            return cur.rowcount == 1

    def complete(self, sess: dict) -> str | None:
        n = len(json.loads(sess["schedule_json"]))
        with self._conn() as c:
            got = c.execute("SELECT COUNT(*) FROM trials WHERE session_id=?", (sess["session_id"],)).fetchone()[0]
            if got < n:
                return None
            code = sess["completion_code"] or "C" + hashlib.sha256(self.secret + sess["session_id"].encode()).hexdigest()[:8].upper()
            c.execute("UPDATE sessions SET status='completed', completed=COALESCE(completed, ?), completion_code=? "
                      "WHERE session_id=?", (time.time(), code, sess["session_id"]))
            return code

    # -- read-out ---------------------------------------------------------------------------------------------
    def sessions(self, obs_id: str | None = None) -> list[dict]:
        with self._conn() as c:
            q = "SELECT * FROM sessions" + (" WHERE obs_id=?" if obs_id else "") + " ORDER BY created, session_id"
            return [dict(r) for r in c.execute(q, (obs_id,) if obs_id else ())]

    def trials(self, sid: str) -> list[dict]:
        with self._conn() as c:
            return [dict(r) for r in c.execute("SELECT * FROM trials WHERE session_id=? ORDER BY trial_idx", (sid,))]

    def conflicts(self) -> list[dict]:
        """Every logged conflicting attempt. An attempt is logged each time it arrives, so a client that retries a
        conflicting write whose 409 was lost (e.g. to a server crash) appears more than once."""
        with self._conn() as c:
            return [dict(r) for r in c.execute("SELECT * FROM conflicts ORDER BY ts")]

    def raw_pids(self) -> dict[str, str]:
        """session_id -> raw participant ID (only stored when the study config says ``store_raw_pid: true``)."""
        with self._conn() as c:
            return {r[0]: r[1] for r in c.execute("SELECT session_id, pid FROM raw_pids")}

    def count(self, table: str) -> int:
        assert table in ("trials", "conflicts", "events", "sessions", "raw_pids")
        with self._conn() as c:
            return c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def _write_trial(c: sqlite3.Connection, row: tuple, rt_ms: float) -> str:
    """One trial write inside the writer's transaction: first write wins; the same answer again is a duplicate;
    a different one is logged in ``conflicts`` (with ``rt_ms`` as the client sent it)."""
    sid, idx, side_pressed = row[0], row[1], row[7]
    cur = c.execute("INSERT INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING", row)
    if cur.rowcount == 1:
        return "stored"
    old = c.execute("SELECT side_pressed, rt_ms FROM trials WHERE session_id=? AND trial_idx=?", (sid, idx)).fetchone()
    if old["side_pressed"] == side_pressed and abs(old["rt_ms"] - float(rt_ms)) < 1e-6:
        return "duplicate"
    c.execute("INSERT INTO conflicts VALUES (?,?,?,?)", (sid, idx, json.dumps(
        {"side_pressed": side_pressed, "rt_ms": rt_ms}), time.time()))
    return "conflict"
