"""Loopback mail: an ``aiosmtpd`` server on 127.0.0.1:<ephemeral> that delivers every message into a Maildir.

Why a real SMTP hop: the grader cross-checks a ``send_email`` call against what actually arrived [R], so sending goes
through ``smtplib`` → SMTP → Maildir and ``sent_messages`` reads the Maildir back. The server accepts any recipient but
only ever writes locally: it has no relay code path. The envelope recipients are stamped into a header because Maildir
keeps only the message.

The listening socket is bound to port 0 by us and handed to the event loop (aiosmtpd's ``Controller`` probes its
configured port, which does not work with port 0).
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import mailbox
import smtplib
import socket
import threading
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

ENVELOPE_HEADER = "X-Sandbox-Envelope-To"
SEQ_HEADER = "X-Sandbox-Seq"
SMTP_HOSTNAME = "mail.sandbox.local"  # fixed so neither side does a DNS lookup (getfqdn) per message


@dataclass(frozen=True)
class SentMail:
    """One delivered message as read back from the Maildir."""

    sender: str
    recipients: tuple[str, ...]
    subject: str
    body: str
    attachments: tuple[str, ...] = ()


class _MaildirHandler:
    """aiosmtpd handler: accept every recipient, store the message locally (never relay)."""

    def __init__(self, maildir: Path):
        self.maildir = maildir

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any) -> str:
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
        del msg[ENVELOPE_HEADER]
        msg[ENVELOPE_HEADER] = ", ".join(envelope.rcpt_tos)
        deliver(self.maildir, msg)
        return "250 Message accepted for delivery"


def create_maildir(maildir: Path) -> None:
    """An empty Maildir (``tmp``/``new``/``cur``) at ``maildir``, which must not exist."""
    mailbox.Maildir(maildir, create=True)


def deliver(maildir: Path, msg: EmailMessage) -> None:
    """Write ``msg`` into ``maildir`` (also the no-server path used with ``smtp=False``)."""
    mailbox.Maildir(maildir, create=True).add(msg)


class SMTPServer:
    """An aiosmtpd SMTP server on its own thread and event loop; ``port`` is the kernel-assigned port."""

    def __init__(self, maildir: Path):
        self.handler = _MaildirHandler(maildir)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.host, self.port = self._sock.getsockname()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="office-smtp", daemon=True)
        self._thread.start()
        if not ready.wait(5.0):
            raise RuntimeError("office sandbox SMTP server did not start within 5 s")

    def _run(self, ready: threading.Event) -> None:
        from aiosmtpd.smtp import SMTP  # optional dependency: agentmill[constraint-rot]

        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(self._loop.create_server(
            lambda: SMTP(self.handler, hostname=SMTP_HOSTNAME, ident="office-sandbox", loop=self._loop),
            sock=self._sock))
        ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def set_maildir(self, maildir: Path) -> None:
        self.handler.maildir = maildir

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)


def build_message(sender: str, to: list[str], subject: str, body: str, seq: int,
                  attachments: list[tuple[str, str]] = ()) -> EmailMessage:
    """A plain-text message with optional text attachments ``(filename, content)``."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Subject"] = subject.replace("\r", " ").replace("\n", " ")
    msg[SEQ_HEADER] = str(seq)
    msg.set_content(body)
    for name, content in attachments:
        msg.add_attachment(content.encode("utf-8"), maintype="application", subtype="octet-stream", filename=name)
    return msg


class SMTPClient:
    """A kept-open ``smtplib`` session to the sandbox server (one reconnect on a dropped session).

    TCP_NODELAY matters: smtplib writes a message in several small sends, and Nagle's algorithm against the
    peer's delayed ACK otherwise adds ~40 ms per message on loopback.
    """

    def __init__(self, host: str, port: int, *, timeout: float):
        self.host, self.port, self.timeout = host, port, timeout
        self._client: smtplib.SMTP | None = None

    def _connect(self) -> smtplib.SMTP:
        client = smtplib.SMTP(self.host, self.port, local_hostname=SMTP_HOSTNAME, timeout=self.timeout)
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.ehlo()
        return client

    def send(self, msg: EmailMessage, recipients: list[str]) -> None:
        for attempt in (0, 1):
            if self._client is None:
                self._client = self._connect()
            try:
                self._client.send_message(msg, from_addr=str(msg["From"]), to_addrs=recipients)
                return
            except smtplib.SMTPServerDisconnected:
                self._client = None
                if attempt:
                    raise

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.quit()
            except (smtplib.SMTPException, OSError):
                pass
            self._client = None


def sent_messages(maildir: Path) -> list[SentMail]:
    """Every message in ``maildir``, in send order."""
    if not maildir.exists():
        return []
    box = mailbox.Maildir(maildir, factory=None, create=False)
    msgs = [email.message_from_bytes(box.get_bytes(k), policy=email.policy.default) for k in box.keys()]
    msgs.sort(key=lambda m: int(m.get(SEQ_HEADER, "0")))
    out = []
    for m in msgs:
        body_part = m.get_body(preferencelist=("plain",))
        body = body_part.get_content() if body_part is not None else ""
        atts = tuple(a.get_filename() or "" for a in m.iter_attachments())
        rcpts = tuple(r.strip() for r in str(m.get(ENVELOPE_HEADER, "")).split(",") if r.strip())
        out.append(SentMail(sender=str(m["From"]), recipients=rcpts, subject=str(m["Subject"] or ""),
                            body=body.rstrip("\n"), attachments=atts))
    return out
