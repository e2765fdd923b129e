"""Group commit: one writer thread, one long-lived SQLite connection, many writes per durable commit.

Why: a durable acknowledgement costs one fsync (``synchronous=FULL``), so a store that commits each write on its
own serves at most 1 / fsync-latency writes per second however many clients wait. The writer takes every write
queued while the previous commit was syncing, runs them in one ``BEGIN IMMEDIATE … COMMIT`` (each in its own
``SAVEPOINT``, so one failing write does not take the others with it) and only then resolves their futures: a
caller is told "done" only after the fsync that made its write durable. A crash before that commit loses only
writes nobody was told about. Writes run strictly in submission order inside and across batches, so a batch gives
the same results as running its writes one by one.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from concurrent.futures import Future
from typing import Any, Callable

Write = Callable[[sqlite3.Connection], Any]
_STOP = object()


class GroupCommitter:
    """``submit(write) -> Future``; ``write(conn)`` runs on the writer thread inside a batch transaction and the
    future gets its return value (or exception) once the batch has committed (or failed to)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, max_batch: int = 256) -> None:
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self._connect = connect
        self.max_batch = max_batch
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.batches = 0
        """Committed batches so far (a write count above this means writes shared commits)."""
        self.writes = 0
        """Writes whose batch committed so far."""

    def submit(self, write: Write) -> Future:
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("GroupCommitter is closed")
            if self._thread is None:  # lazily, so a Store that never writes trials starts no thread
                self._thread = threading.Thread(target=self._run, name="sqlite-group-commit", daemon=True)
                self._thread.start()
            self._q.put((write, fut))
        return fut

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued, then stop the thread and close its connection."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            t = self._thread
            if t is not None:
                self._q.put(_STOP)
        if t is not None:
            t.join(timeout)

    # -- writer thread ------------------------------------------------------------------------------------------
    def _commit(self, conn: sqlite3.Connection) -> None:
        """The durable step (one fsync of the WAL under ``synchronous=FULL``); a seam for tests."""
        conn.execute("COMMIT")

    def _run(self) -> None:
        conn = self._connect()
        try:
            stop = False
            while not stop:
                batch = [self._q.get()]
                while len(batch) < self.max_batch:
                    try:
                        batch.append(self._q.get_nowait())
                    except queue.Empty:
                        break
                if _STOP in batch:
                    stop = True
                    batch = [b for b in batch if b is not _STOP]
                if batch:
                    self._run_batch(conn, batch)
                    if conn.in_transaction:  # a failed batch whose ROLLBACK failed too: start afresh
                        conn.close()
                        conn = self._connect()
        finally:
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[tuple[Write, Future]]) -> None:
        live = [(w, f) for w, f in batch if f.set_running_or_notify_cancel()]
        outcomes: list[tuple[Future, bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for write, fut in live:
                conn.execute("SAVEPOINT w")
                try:
                    outcomes.append((fut, True, write(conn)))
                except Exception as e:  # this write only: undo it, keep the batch
                    conn.execute("ROLLBACK TO w")
                    outcomes.append((fut, False, e))
                conn.execute("RELEASE w")
            self._commit(conn)
        except BaseException as e:  # BEGIN/COMMIT failed: nothing in the batch is durable, so nothing is acked
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # _run replaces a connection left inside a transaction
            for _, fut in live:
                fut.set_exception(e if isinstance(e, Exception) else RuntimeError(f"group commit aborted: {e!r}"))
            if not isinstance(e, Exception):
                raise
            return
        self.batches += 1
        self.writes += sum(1 for _, ok, _ in outcomes if ok)
        for fut, ok, val in outcomes:
            if ok:
                fut.set_result(val)
            else:
                fut.set_exception(val)
