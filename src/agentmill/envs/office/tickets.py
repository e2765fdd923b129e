"""Helpdesk tickets and refunds in SQLite (outside the shared drive, so file tools cannot edit them).

Why refunds have no cap here: the refund-cap and no-deletion rules are the catalogue's; the sandbox only executes
and records, so a violating call leaves real state behind for the cross-check [R].
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUSES = ("open", "pending", "resolved", "closed")


@dataclass(frozen=True)
class Ticket:
    ticket_id: str
    customer: str
    customer_email: str
    subject: str
    body: str
    status: str
    amount_paid: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refund:
    ticket_id: str
    amount: float


class TicketStore:
    """One SQLite file; a single connection guarded by a lock (tools run on a worker thread)."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._con: sqlite3.Connection | None = None

    def reset(self, tickets: list[dict[str, Any]]) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
            self.path.unlink(missing_ok=True)
            con = sqlite3.connect(self.path, check_same_thread=False)
            con.execute("PRAGMA synchronous=OFF")
            con.executescript("""
                CREATE TABLE tickets (ticket_id TEXT PRIMARY KEY, customer TEXT, customer_email TEXT, subject TEXT,
                                      body TEXT, status TEXT, amount_paid REAL, notes TEXT DEFAULT '');
                CREATE TABLE refunds (n INTEGER PRIMARY KEY AUTOINCREMENT, ticket_id TEXT, amount REAL);
                CREATE TABLE deleted (ticket_id TEXT);""")
            con.executemany("INSERT INTO tickets (ticket_id, customer, customer_email, subject, body, status, "
                            "amount_paid) VALUES (:ticket_id, :customer, :customer_email, :subject, :body, :status, "
                            ":amount_paid)", tickets)
            con.commit()
            self._con = con

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def _q(self, sql: str, args: tuple = ()) -> list[tuple]:
        assert self._con is not None, "TicketStore used before reset()"
        with self._lock:
            rows = self._con.execute(sql, args).fetchall()
            self._con.commit()
        return rows

    def add(self, t: dict[str, Any]) -> None:
        if self._q("SELECT 1 FROM tickets WHERE ticket_id=?", (t["ticket_id"],)):
            raise ValueError(f"ticket {t['ticket_id']!r} already exists")
        self._q("INSERT INTO tickets (ticket_id, customer, customer_email, subject, body, status, amount_paid) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)", (t["ticket_id"], t["customer"], t["customer_email"], t["subject"],
                                                t["body"], t["status"], t["amount_paid"]))

    def tickets(self, status: str | None = None) -> list[Ticket]:
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; choose one of {list(STATUSES)}")
        rows = self._q("SELECT * FROM tickets ORDER BY ticket_id") if status is None else \
            self._q("SELECT * FROM tickets WHERE status=? ORDER BY ticket_id", (status,))
        return [Ticket(*r[:7], notes=tuple(n for n in r[7].split("\n") if n)) for r in rows]

    def _get(self, ticket_id: str) -> Ticket:
        rows = self._q("SELECT * FROM tickets WHERE ticket_id=?", (ticket_id,))
        if not rows:
            raise ValueError(f"no ticket {ticket_id!r}")
        r = rows[0]
        return Ticket(*r[:7], notes=tuple(n for n in r[7].split("\n") if n))

    def update(self, ticket_id: str, status: str | None, note: str | None) -> Ticket:
        if status is None and note is None:
            raise ValueError("update_ticket needs a status or a note")
        if status is not None and status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; choose one of {list(STATUSES)}")
        t = self._get(ticket_id)
        notes = "\n".join([*t.notes, note.replace("\n", " ")] if note is not None else t.notes)
        self._q("UPDATE tickets SET status=?, notes=? WHERE ticket_id=?", (status or t.status, notes, ticket_id))
        return self._get(ticket_id)

    def delete(self, ticket_id: str) -> None:
        self._get(ticket_id)
        self._q("DELETE FROM tickets WHERE ticket_id=?", (ticket_id,))
        self._q("INSERT INTO deleted VALUES (?)", (ticket_id,))

    def refund(self, ticket_id: str, amount: float) -> Refund:
        if amount <= 0:
            raise ValueError(f"amount must be positive, got {amount!r}")
        self._get(ticket_id)
        self._q("INSERT INTO refunds (ticket_id, amount) VALUES (?, ?)", (ticket_id, float(amount)))
        return Refund(ticket_id, float(amount))

    def refunds(self) -> list[Refund]:
        return [Refund(t, a) for t, a in self._q("SELECT ticket_id, amount FROM refunds ORDER BY n")]

    def deleted(self) -> list[str]:
        return [r[0] for r in self._q("SELECT ticket_id FROM deleted ORDER BY rowid")]
