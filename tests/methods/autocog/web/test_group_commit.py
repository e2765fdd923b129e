"""Group commit (web/group_commit.py): a write is acknowledged only after the commit that made it durable, writes
queued during a commit share the next one, one failing write does not sink its batch, a failed commit acks
nothing, and a kill -9 between batches loses no acknowledged trial."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from agentmill.methods.autocog.web.group_commit import GroupCommitter
from agentmill.methods.autocog.web.loadtest import U8_DESIGN
from agentmill.methods.autocog.web.store import Store


def _connect(path):
    def connect() -> sqlite3.Connection:
        c = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=FULL")
        return c
    return connect


class GatedCommitter(GroupCommitter):
    """Holds every COMMIT until the test opens the gate; counts commits reached."""

    def __init__(self, connect, **kw) -> None:
        super().__init__(connect, **kw)
        self.gate = threading.Event()
        self.at_commit = threading.Semaphore(0)

    def _commit(self, conn) -> None:
        self.at_commit.release()
        assert self.gate.wait(10)
        super()._commit(conn)


def _insert(v: int):
    return lambda c: c.execute("INSERT INTO t VALUES (?)", (v,)).rowcount


def _rows(path) -> list[int]:
    with sqlite3.connect(path) as c:
        return sorted(r[0] for r in c.execute("SELECT v FROM t"))


@pytest.fixture()
def db(tmp_path):
    p = tmp_path / "g.sqlite"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE t(v INTEGER PRIMARY KEY)")
    return p


def test_ack_only_after_commit_and_batching(db) -> None:
    g = GatedCommitter(_connect(db))
    first = g.submit(_insert(1))
    assert g.at_commit.acquire(timeout=5)  # batch [1] is at its COMMIT, held
    later = [g.submit(_insert(v)) for v in (2, 3, 4)]  # queued behind the held commit
    time.sleep(0.05)
    assert not first.done() and not any(f.done() for f in later)  # nothing acknowledged before the commit
    assert _rows(db) == []  # and nothing visible to another connection
    g.gate.set()
    assert first.result(5) == 1 and [f.result(5) for f in later] == [1, 1, 1]
    assert _rows(db) == [1, 2, 3, 4]
    assert g.batches == 2 and g.writes == 4  # 2, 3, 4 shared one commit
    g.close()


def test_failing_write_is_isolated_and_failed_commit_acks_nothing(db) -> None:
    g = GatedCommitter(_connect(db))
    g.gate.set()
    assert g.submit(_insert(1)).result(5) == 1
    g.gate.clear()
    blocker = g.submit(_insert(2))
    assert g.at_commit.acquire(timeout=5)
    dup, ok = g.submit(_insert(1)), g.submit(_insert(3))  # same batch: 1 violates the primary key
    g.gate.set()
    assert blocker.result(5) == 1 and ok.result(5) == 1
    with pytest.raises(sqlite3.IntegrityError):
        dup.result(5)
    assert _rows(db) == [1, 2, 3]

    class FailingCommit(GroupCommitter):
        def _commit(self, conn) -> None:
            raise sqlite3.OperationalError("disk I/O error (injected)")

    f = FailingCommit(_connect(db))
    futs = [f.submit(_insert(v)) for v in (10, 11)]
    for fut in futs:
        with pytest.raises(sqlite3.OperationalError, match="injected"):
            fut.result(5)
    assert _rows(db) == [1, 2, 3]  # rolled back: no acknowledgement, no row
    g.close()
    f.close()


def test_bad_max_batch_and_submit_after_close(db) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        GroupCommitter(_connect(db), max_batch=0)
    g = GroupCommitter(_connect(db))
    fut = g.submit(_insert(5))
    g.close()
    assert fut.result(5) == 1 and _rows(db) == [5]  # close commits what was queued
    with pytest.raises(RuntimeError, match="closed"):
        g.submit(_insert(6))


def test_store_semantics_inside_one_batch(tmp_path) -> None:
    """stored / duplicate / conflict are decided in submission order even when the writes share a commit."""
    st = Store(tmp_path / "s.sqlite")
    st.add_observation("o1", U8_DESIGN)
    (tok,) = st.create_sessions("o1", 1)
    s = st.session(tok)
    hold = sqlite3.connect(st.path, isolation_level=None)
    hold.execute("BEGIN IMMEDIATE")  # another writer holds the lock: the writer waits at its BEGIN
    f0 = st.put_trial_future(s, 0, "L", 900.0, None)
    time.sleep(0.1)
    fs = [st.put_trial_future(s, 1, "L", 900.0, None), st.put_trial_future(s, 1, "L", 900.0, None),
          st.put_trial_future(s, 1, "R", 900.0, None)]
    time.sleep(0.1)
    assert not f0.done() and not any(f.done() for f in fs)
    hold.execute("ROLLBACK")
    assert f0.result(5) == "stored" and [f.result(5) for f in fs] == ["stored", "duplicate", "conflict"]
    assert st._writer.batches == 2
    assert [(r["trial_idx"], r["side_pressed"]) for r in st.trials(s["session_id"])] == [(0, "L"), (1, "L")]
    assert [(r["trial_idx"], r["session_id"]) for r in st.conflicts()] == [(1, s["session_id"])]
    st.close()


CHILD = """
import sys, threading
from agentmill.methods.autocog.web.store import Store
st = Store(sys.argv[1])
toks = sys.argv[2:]
sessions = [st.session(t) for t in toks]
lock = threading.Lock()
def client(s):
    for i in range(100):
        res = st.put_trial(s, i, "L", 900.0, None)
        with lock:
            print(s["session_id"], i, res, flush=True)
for s in sessions:
    threading.Thread(target=client, args=(s,)).start()
"""


def test_kill9_between_batches_loses_no_acknowledged_trial(tmp_path) -> None:
    db = tmp_path / "k.sqlite"
    st = Store(db)
    st.add_observation("o1", U8_DESIGN)
    toks = st.create_sessions("o1", 8)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(db), *toks], stdout=subprocess.PIPE, text=True)
    acked: list[tuple[str, int]] = []
    for line in p.stdout:  # kill -9 after the first 60 acknowledgements, mid-stream
        sid, i, res = line.split()
        assert res == "stored"
        acked.append((sid, int(i)))
        if len(acked) == 60:
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    # Only whole lines are acknowledgements: SIGKILL can cut the child's last line short ("c3f" with no index).
    for ln in p.stdout.read().split("\n")[:-1]:
        sid, i, res = ln.split()
        assert res == "stored"
        acked.append((sid, int(i)))
    stored = {(r["session_id"], r["trial_idx"]) for s in st.sessions() for r in st.trials(s["session_id"])}
    assert p.returncode == -signal.SIGKILL
    assert set(acked) <= stored  # every acknowledged trial survived the kill (800 were to come: mid-stream)
