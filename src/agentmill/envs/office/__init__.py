"""Office sandbox (docs/methods/constraint_rot.md): real tools over loopback backends, one disposable root per sandbox.

Reusable by any method that needs a tool-using agent to act on real state: mail through a loopback SMTP server
into a Maildir, a jailed shared drive, an iCalendar calendar, an intranet HTTP stub, SQLite databases, helpdesk
tickets, chat channels, a simulated git remote and memory entries. Needs the ``constraint-rot`` extra
(``aiosmtpd``, ``icalendar``).
"""

from __future__ import annotations

from agentmill.envs.office.calendar import CalendarEvent
from agentmill.envs.office.chat import ChannelPost
from agentmill.envs.office.db import DbWrite
from agentmill.envs.office.fixtures import FIXED_CLOCK, Fixtures, generate_fixtures, luhn_valid
from agentmill.envs.office.http_stub import INTRANET_HOST, HttpPost
from agentmill.envs.office.mail import SentMail
from agentmill.envs.office.sandbox import InternalDoc, OfficeSandbox, SandboxState, split_addresses
from agentmill.envs.office.tickets import Refund, Ticket
from agentmill.envs.office.tools import (OUTPUT_LIMIT_BYTES, TOOL_NAMES, TOOL_SPECS, CallRecord, ToolResult,
                                         ToolSpec, validate_arguments)
from agentmill.envs.office.vcs import Push

__all__ = [
    "FIXED_CLOCK", "INTRANET_HOST", "OUTPUT_LIMIT_BYTES", "TOOL_NAMES", "TOOL_SPECS", "CalendarEvent", "CallRecord",
    "ChannelPost", "DbWrite", "Fixtures", "HttpPost", "InternalDoc", "OfficeSandbox", "Push", "Refund",
    "SandboxState", "SentMail", "Ticket", "ToolResult", "ToolSpec", "generate_fixtures", "luhn_valid",
    "split_addresses", "validate_arguments",
]
