"""``OfficeSandbox``: the per-episode office (docs/methods/constraint_rot.md) — real tools over loopback backends.

Why this shape: episodes need genuine tool outputs and a state the grader can cross-check against the logged
calls [R], at scripted-tier speed (PF-7: servers start once per sandbox object, ``reset`` only rewrites state).
Every call goes through ``execute``: schema validation, the backend on a worker thread with a per-tool timeout,
output truncation, and a log entry — a bad call becomes ``ToolResult(ok=False)``, never an exception. Not
thread-safe: one sandbox serves one episode at a time.

Root layout: ``drive/`` (the jailed shared drive; ``drive/data/{prod,staging}.db`` live inside it), ``mail/``
(the Maildir the SMTP server delivers into), ``state/`` (tickets.db, calendar.ics, internal_queue.jsonl,
remote.json — out of reach of the file tools).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import smtplib
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentmill.core.types import ToolCall
from agentmill.envs.office import db as dbmod
from agentmill.envs.office.calendar import CalendarEvent, CalendarStore
from agentmill.envs.office.chat import ChannelPost, ChatStore
from agentmill.envs.office.files import FileJail
from agentmill.envs.office.fixtures import FIXED_CLOCK, Fixtures, generate_fixtures
from agentmill.envs.office.http_stub import HttpPost, HttpStub, SiteData, check_url, request
from agentmill.envs.office.mail import (ENVELOPE_HEADER, SentMail, SMTPClient, SMTPServer, build_message,
                                        create_maildir, deliver, sent_messages)
from agentmill.envs.office.tickets import Refund, Ticket, TicketStore
from agentmill.envs.office.tools import (SPECS_BY_NAME, TOOL_NAMES, TOOL_SPECS, CallRecord, ToolArgumentError,
                                         ToolResult, ToolSpec, truncate_output, validate_arguments)
from agentmill.envs.office.vcs import GitRemote, Push

TOOL_TIMEOUT_S = 5.0  # [R] per-tool deadline: a hung tool must not hang the episode


@dataclass(frozen=True)
class InternalDoc:
    to: str
    doc: str


@dataclass(frozen=True)
class SandboxState:
    """Snapshot of everything the tools changed, read back from the backends (not from the call log)."""

    seed: int
    company_domain: str
    sent_mail: tuple[SentMail, ...]
    internal_queue: tuple[InternalDoc, ...]
    files: dict[str, str]  # drive-relative path -> sha256 (or "symlink")
    removed_files: tuple[str, ...]  # seeded or planted paths that no longer exist
    events: tuple[CalendarEvent, ...]
    http_posts: tuple[HttpPost, ...]
    http_refused: tuple[tuple[str, str], ...]  # (method, url) refused for a foreign host
    databases: dict[str, dict[str, Any]]  # "prod"/"staging" -> {"tables": {name: rows}, "sha256": str}
    db_writes: tuple[dbmod.DbWrite, ...]
    tickets: tuple[Ticket, ...]
    deleted_tickets: tuple[str, ...]
    refunds: tuple[Refund, ...]
    channel_posts: tuple[ChannelPost, ...]
    pushes: tuple[Push, ...]
    remote_heads: dict[str, str] = field(default_factory=dict)
    db_refused: tuple[tuple[str, str, str], ...] = ()  # (db, sql, reason) the SQL jail refused (ATTACH, VACUUM, ...)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_addresses(to: str) -> list[str]:
    """``"a@x, b@y"`` → ``["a@x", "b@y"]``; ``ValueError`` names any malformed address."""
    addrs = [a.strip() for a in to.replace(";", ",").split(",") if a.strip()]
    if not addrs:
        raise ValueError("'to' must contain at least one address")
    bad = [a for a in addrs if a.count("@") != 1 or any(c.isspace() for c in a) or a.startswith("@")
           or a.endswith("@") or any(c in a for c in "<>\r\n")]
    if bad:
        raise ValueError(f"malformed address(es) {bad} in 'to'")
    return addrs


def scratch_dir() -> str | None:
    """Where a sandbox without an explicit root lives: ``/dev/shm`` when it is a writable directory and the user
    has not chosen ``$TMPDIR``, else the system temp dir (``None``). Every reset rewrites the whole office, and
    on disk that is rmtree-bound (~80 ms per reset measured; building 320 SFT examples spent most of its 40 s
    there)."""
    shm = "/dev/shm"
    if not os.environ.get("TMPDIR") and os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return None


class OfficeSandbox:
    """Per-episode office: mail, shared drive, calendar, intranet, databases, tickets, chat, git, memory."""

    def __init__(self, seed: int, *, root: Path | None = None, clock: datetime = FIXED_CLOCK, smtp: bool = True,
                 http: bool = True, domain: str | None = None, tool_timeout_s: float = TOOL_TIMEOUT_S):
        if clock.tzinfo is None:
            raise ValueError(f"clock must be timezone-aware, got {clock!r}")
        self.clock = clock
        self.domain = domain
        self.tool_timeout_s = tool_timeout_s
        self._own_root = root is None
        self.root = (Path(tempfile.mkdtemp(prefix="office-", dir=scratch_dir())) if root is None
                     else Path(root).resolve())
        self.drive = self.root / "drive"
        self.maildir = self.root / "mail"
        self.state_dir = self.root / "state"
        for d in (self.drive, self.state_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.jail = FileJail(self.drive)
        self.site = SiteData()
        self.calendar = CalendarStore(self.state_dir / "calendar.ics", clock)
        self.ticket_store = TicketStore(self.state_dir / "tickets.db")
        self.chat = ChatStore()
        self.git = GitRemote(self.state_dir / "remote.json")
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="office-tool")
        self._closed = False
        self.smtp_server: SMTPServer | None = None
        self.smtp_client: SMTPClient | None = None
        self.http_server: HttpStub | None = None
        try:
            self.smtp_server = SMTPServer(self.maildir) if smtp else None
            self.smtp_client = (SMTPClient(self.smtp_server.host, self.smtp_server.port, timeout=tool_timeout_s)
                                if self.smtp_server else None)
            self.http_server = HttpStub(self.site) if http else None
            self.reset(seed)
        except BaseException:
            self.close()
            raise

    # -- lifecycle --------------------------------------------------------------------------------------------
    def __enter__(self) -> OfficeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the servers and the tool worker; delete the root if the sandbox created it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.smtp_client is not None:
            self.smtp_client.close()
        for server in (self.smtp_server, self.http_server):
            if server is not None:
                server.close()
        self.ticket_store.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def reset(self, seed: int, *, domain: str | None = None) -> None:
        """Wipe every store and regenerate the fixtures for ``seed``; the servers keep running."""
        if self._closed:
            raise RuntimeError("OfficeSandbox is closed")
        if domain is not None:
            self.domain = domain
        fx = generate_fixtures(seed, self.clock, domain=self.domain)
        self.seed, self.fixtures = seed, fx
        self.jail.wipe()
        for path, text in fx.files.items():
            self.jail.write(path, text)
        dbmod.create_databases(self.drive / "data", fx.customers, fx.orders)
        self.jail.invalidate_usage()  # the databases were written beside the jail's own accounting
        self._tracked_paths = set(fx.files) | {f"data/{n}.db" for n in dbmod.DATABASES}
        shutil.rmtree(self.maildir, ignore_errors=True)
        create_maildir(self.maildir)
        (self.state_dir / "internal_queue.jsonl").write_text("")
        self.calendar.reset(fx.events, self.clock)
        self.site.reset(fx.pages)
        self.ticket_store.reset(fx.tickets)
        self.chat.reset(fx.channels)
        self.git.reset(fx.git)
        self.inbox: list[dict[str, str]] = [dict(m) for m in fx.inbox]
        self.memory: list[str] = list(fx.memory)
        self.calls: list[CallRecord] = []
        self.http_refused: list[tuple[str, str]] = []
        self.db_writes: list[dbmod.DbWrite] = []
        self.db_refused: list[tuple[str, str, str]] = []
        self._seq = 0

    # -- addresses --------------------------------------------------------------------------------------------
    @property
    def company_domain(self) -> str:
        return self.fixtures.company_domain

    @property
    def agent_address(self) -> str:
        return f"agent@{self.company_domain}"

    @property
    def base_url(self) -> str:
        """The stub's own URL (``http://intranet.local`` reaches the same pages)."""
        return self.http_server.base_url if self.http_server else "http://intranet.local"

    # -- harness hooks ----------------------------------------------------------------------------------------
    def set_memory(self, entries: list[str]) -> None:
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ValueError(f"memory entries must be a list of str, got {entries!r:.80}")
        self.memory = list(entries)

    def plant_page(self, path: str, text: str) -> str:
        """Serve ``text`` at ``path`` (e.g. ``/policies/mail``); returns the intranet URL."""
        if not path.startswith("/"):
            raise ValueError(f"page path must start with '/', got {path!r}")
        with self.site.lock:
            self.site.pages[path] = text
        return f"http://intranet.local{path}"

    def plant_file(self, path: str, text: str) -> str:
        """Write ``text`` to the drive (jailed, size-capped); returns the drive-relative path."""
        rel = self.jail.rel(self.jail.resolve(path))
        self.jail.write(path, text)
        self._tracked_paths.add(rel)
        return rel

    def plant_email(self, sender: str, subject: str, body: str, *, msg_id: str | None = None,
                    date: str | None = None, to: str | None = None) -> str:
        """Add a message to the inbox (newest last); returns its ``msg_id``."""
        ids = {m["msg_id"] for m in self.inbox}
        msg_id = msg_id or next(f"m{n:03d}" for n in range(len(ids) + 1, 10_000) if f"m{n:03d}" not in ids)
        if msg_id in ids:
            raise ValueError(f"msg_id {msg_id!r} already in the inbox")
        self.inbox.append({"msg_id": msg_id, "from": sender, "to": to or self.agent_address, "subject": subject,
                           "date": date or self.clock.isoformat(), "body": body})
        return msg_id

    def plant_ticket(self, subject: str, body: str, *, ticket_id: str | None = None, customer: str = "Sam Doe",
                     customer_email: str = "sam.doe@mail.example", status: str = "open",
                     amount_paid: float = 100.0) -> str:
        """Add a helpdesk ticket; returns its id."""
        ticket_id = ticket_id or f"T-{2001 + len(self.ticket_store.tickets()) + len(self.ticket_store.deleted())}"
        self.ticket_store.add({"ticket_id": ticket_id, "customer": customer, "customer_email": customer_email,
                               "subject": subject, "body": body, "status": status, "amount_paid": amount_paid})
        return ticket_id

    # -- the tool interface -----------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        return list(TOOL_SPECS)

    def execute(self, call: ToolCall) -> ToolResult:
        """Validate, run with a timeout, truncate, log. Never raises for a bad call."""
        t0 = time.perf_counter()
        result = self._execute(call)
        self.calls.append(CallRecord(call, result, time.perf_counter() - t0))
        return result

    def _execute(self, call: ToolCall) -> ToolResult:
        call_id, name = str(getattr(call, "id", "")), getattr(call, "name", None)

        def fail(msg: str) -> ToolResult:
            return ToolResult(call_id, str(name), False, "", truncate_output(msg))

        if self._closed:
            return fail("the sandbox is closed")
        spec = SPECS_BY_NAME.get(name) if isinstance(name, str) else None
        if spec is None:
            return fail(f"unknown tool {name!r}; available tools: {', '.join(TOOL_NAMES)}")
        try:
            args = validate_arguments(spec, getattr(call, "arguments", None))
        except ToolArgumentError as e:
            return fail(str(e))
        future = self._pool.submit(getattr(self, f"_tool_{name}"), **args)
        try:
            output = future.result(timeout=self.tool_timeout_s)
        except cf.TimeoutError:
            # The stuck worker is abandoned (backends carry their own socket/SQLite deadlines too).
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="office-tool")
            return fail(f"{name} timed out after {self.tool_timeout_s:g} s")
        except (ValueError, OSError, TimeoutError, smtplib.SMTPException) as e:
            return fail(f"{name}: {e}")
        except Exception as e:  # noqa: BLE001 — a tool bug must still come back as a result
            return fail(f"{name}: internal error {type(e).__name__}: {e}")
        return ToolResult(call_id, name, True, truncate_output(output))

    # -- mail -------------------------------------------------------------------------------------------------
    def _send(self, to: list[str], subject: str, body: str, attachments: list[tuple[str, str]]) -> None:
        self._seq += 1
        msg = build_message(self.agent_address, to, subject, body, self._seq, attachments)
        if self.smtp_client is not None:
            self.smtp_client.send(msg, to)
        else:
            msg[ENVELOPE_HEADER] = ", ".join(to)
            deliver(self.maildir, msg)

    def _message(self, msg_id: str) -> dict[str, str]:
        for m in self.inbox:
            if m["msg_id"] == msg_id.strip():
                return m
        raise ValueError(f"no message {msg_id!r} in the inbox (see list_inbox)")

    def _tool_send_email(self, to: str, subject: str, body: str, attachments: list[str]) -> str:
        rcpts = split_addresses(to)
        files = [(self.jail.resolve(p).name, self.jail.read(p)) for p in attachments]
        self._send(rcpts, subject, body, files)
        return f"Sent to {', '.join(rcpts)} (subject {subject!r}, {len(files)} attachment(s))."

    def _tool_forward_email(self, msg_id: str, to: str) -> str:
        m = self._message(msg_id)
        rcpts = split_addresses(to)
        body = (f"---------- Forwarded message ----------\nFrom: {m['from']}\nDate: {m['date']}\n"
                f"Subject: {m['subject']}\n\n{m['body']}")
        self._send(rcpts, f"Fwd: {m['subject']}", body, [])
        return f"Forwarded {m['msg_id']} to {', '.join(rcpts)}."

    def _tool_list_inbox(self) -> str:
        if not self.inbox:
            return "(inbox empty)"
        return "\n".join(f"{m['msg_id']} | {m['date']} | {m['from']} | {m['subject']}" for m in self.inbox)

    def _tool_read_email(self, msg_id: str) -> str:
        m = self._message(msg_id)
        return f"From: {m['from']}\nTo: {m['to']}\nDate: {m['date']}\nSubject: {m['subject']}\n\n{m['body']}"

    def _tool_route_internal(self, to: str, doc: str) -> str:
        if not to.strip() or not doc.strip():
            raise ValueError("route_internal needs a non-empty 'to' and 'doc'")
        with open(self.state_dir / "internal_queue.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"to": to, "doc": doc}, ensure_ascii=False) + "\n")
        return f"Routed to {to} through the internal document queue."

    # -- files ------------------------------------------------------------------------------------------------
    def _tool_read_file(self, path: str) -> str:
        return self.jail.read(path)

    def _tool_write_file(self, path: str, content: str) -> str:
        n = self.jail.write(path, content)
        return f"Wrote {n} bytes to {self.jail.rel(self.jail.resolve(path))}."

    def _tool_list_dir(self, path: str) -> str:
        return self.jail.list_dir(path)

    def _tool_delete_file(self, path: str) -> str:
        rel = self.jail.rel(self.jail.resolve(path))
        self.jail.delete(path)
        return f"Deleted {rel}."

    def _tool_move_file(self, src: str, dst: str) -> str:
        s = self.jail.rel(self.jail.resolve(src))
        return f"Moved {s} -> {self.jail.move(src, dst)}."

    # -- calendar ---------------------------------------------------------------------------------------------
    def _tool_create_event(self, title: str, start: str, end: str, attendees: list[str]) -> str:
        if not title.strip():
            raise ValueError("title must not be empty")
        ev = self.calendar.create(title, start, end, attendees)
        return f"Created event {ev.uid}: {ev.title} {ev.start} - {ev.end} with {list(ev.attendees)}."

    def _tool_list_events(self) -> str:
        evs = self.calendar.events()
        return "\n".join(f"{e.uid} | {e.start} - {e.end} | {e.title} | {', '.join(e.attendees)}"
                         for e in evs) or "(no events)"

    # -- intranet ---------------------------------------------------------------------------------------------
    def _http(self, method: str, url: str, body: str | None) -> tuple[int, str]:
        try:
            path = check_url(url, self.http_server.port if self.http_server else None)
        except ValueError:
            self.http_refused.append((method, url))
            raise
        if self.http_server is None:
            return self.site.get(path.split("?")[0]) if body is None else self.site.post(path.split("?")[0], body)
        return request(self.http_server.port, method, path, body, timeout=self.tool_timeout_s)

    def _tool_http_get(self, url: str) -> str:
        status, text = self._http("GET", url, None)
        if status != 200:
            raise ValueError(f"HTTP {status}: {text}")
        return text

    def _tool_http_post(self, url: str, body: str) -> str:
        status, text = self._http("POST", url, body)
        if status != 200:
            raise ValueError(f"HTTP {status}: {text}")
        return f"HTTP {status}: {text}"

    # -- databases, tickets, chat, git, memory ----------------------------------------------------------------
    def _tool_sql_query(self, db: str, sql: str) -> str:
        name = dbmod.db_name(db)
        try:
            text, changes, wrote = dbmod.run_query(self.drive / "data" / f"{name}.db", sql,
                                                   timeout=self.tool_timeout_s)
        except dbmod.SqlRefused as e:  # an attempt to leave the database file: logged, and a tool error
            self.db_refused.append((name, sql, str(e)))
            raise
        finally:
            self.jail.invalidate_usage()  # the database file lives on the drive and may have grown
        if wrote:
            self.db_writes.append(dbmod.DbWrite(name, sql, changes))
        return text

    def _tool_list_tickets(self, status: str | None) -> str:
        ts = self.ticket_store.tickets(status)
        return "\n".join(f"{t.ticket_id} [{t.status}] {t.customer}: {t.subject} (paid ${t.amount_paid:.2f})"
                         for t in ts) or "(no tickets)"

    def _tool_update_ticket(self, ticket_id: str, status: str | None, note: str | None) -> str:
        t = self.ticket_store.update(ticket_id, status, note)
        return f"Ticket {t.ticket_id}: status {t.status}, {len(t.notes)} note(s)."

    def _tool_delete_ticket(self, ticket_id: str) -> str:
        self.ticket_store.delete(ticket_id)
        return f"Deleted ticket {ticket_id}."

    def _tool_issue_refund(self, ticket_id: str, amount: float) -> str:
        r = self.ticket_store.refund(ticket_id, amount)
        return f"Refunded ${r.amount:.2f} on ticket {r.ticket_id}."

    def _tool_post_message(self, channel: str, text: str) -> str:
        p = self.chat.post(channel, text)
        return f"Posted to #{p.channel} ({'public' if p.public else 'private'} channel)."

    def _tool_git_push(self, branch: str, force: bool) -> str:
        push, msg = self.git.push(branch, force)
        if not push.accepted:
            raise ValueError(msg)
        return msg

    def _tool_memory_read(self) -> str:
        return "\n".join(f"[{i + 1}] {e}" for i, e in enumerate(self.memory)) or "(no memory entries)"

    # -- state ------------------------------------------------------------------------------------------------
    def state(self) -> SandboxState:
        queue = [json.loads(line) for line in
                 (self.state_dir / "internal_queue.jsonl").read_text(encoding="utf-8").splitlines() if line]
        files = self.jail.snapshot()
        with self.site.lock:
            posts = tuple(self.site.posts)
        return SandboxState(
            seed=self.seed, company_domain=self.company_domain,
            sent_mail=tuple(sent_messages(self.maildir)),
            internal_queue=tuple(InternalDoc(q["to"], q["doc"]) for q in queue),
            files=files, removed_files=tuple(sorted(p for p in self._tracked_paths if p not in files)),
            events=tuple(self.calendar.events()), http_posts=posts, http_refused=tuple(self.http_refused),
            databases={n: dbmod.summary(self.drive / "data" / f"{n}.db") for n in dbmod.DATABASES},
            db_writes=tuple(self.db_writes), db_refused=tuple(self.db_refused),
            tickets=tuple(self.ticket_store.tickets()),
            deleted_tickets=tuple(self.ticket_store.deleted()), refunds=tuple(self.ticket_store.refunds()),
            channel_posts=tuple(self.chat.posts), pushes=tuple(self.git.pushes()),
            remote_heads=self.git.remote_heads())

    @property
    def fixtures_digest(self) -> str:
        return self.fixtures.digest()



