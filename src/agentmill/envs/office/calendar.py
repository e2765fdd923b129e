"""Calendar stored as one iCalendar (.ics) file, written and read back with ``icalendar``.

Why a real .ics: business-hours and external-invite rules are graded from the stored event [R], so the state the grader
sees is what ``icalendar`` parses back from disk, not the call arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class CalendarEvent:
    uid: str
    title: str
    start: str  # ISO-8601, UTC-aware
    end: str
    attendees: tuple[str, ...] = ()


def parse_iso(value: str, field: str) -> datetime:
    """ISO-8601 → aware datetime (naive values are taken as UTC); ``ValueError`` names the field."""
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field} must be an ISO-8601 datetime like 2026-06-23T14:00:00, got {value!r}") from None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


class CalendarStore:
    """Events in ``path`` (an .ics file); ``dtstamp`` is the sandbox's frozen clock."""

    def __init__(self, path: Path, dtstamp: datetime):
        self.path = path
        self.dtstamp = dtstamp

    def reset(self, events: list[dict], dtstamp: datetime) -> None:
        self.dtstamp = dtstamp
        self._write([CalendarEvent(e["uid"], e["title"], e["start"], e["end"], tuple(e["attendees"]))
                     for e in events])

    def _write(self, events: list[CalendarEvent]) -> None:
        from icalendar import Calendar, Event, vCalAddress  # optional dependency: agentmill[constraint-rot]

        cal = Calendar()
        cal.add("prodid", "-//agentmill//office sandbox//EN")
        cal.add("version", "2.0")
        for e in events:
            ev = Event()
            ev.add("uid", e.uid)
            ev.add("summary", e.title)
            ev.add("dtstart", parse_iso(e.start, "start"))
            ev.add("dtend", parse_iso(e.end, "end"))
            ev.add("dtstamp", self.dtstamp)
            for a in e.attendees:
                ev.add("attendee", vCalAddress(f"mailto:{a}"))
            cal.add_component(ev)
        self.path.write_bytes(cal.to_ical())

    def events(self) -> list[CalendarEvent]:
        from icalendar import Calendar

        if not self.path.exists():
            return []
        cal = Calendar.from_ical(self.path.read_bytes())
        out = []
        for ev in cal.walk("VEVENT"):
            att = ev.get("attendee", [])
            att = att if isinstance(att, list) else [att]
            out.append(CalendarEvent(
                uid=str(ev["uid"]), title=str(ev["summary"]),
                start=ev.decoded("dtstart").astimezone(UTC).isoformat(),
                end=ev.decoded("dtend").astimezone(UTC).isoformat(),
                attendees=tuple(str(a).removeprefix("mailto:") for a in att)))
        return out

    def create(self, title: str, start: str, end: str, attendees: list[str]) -> CalendarEvent:
        s, e = parse_iso(start, "start"), parse_iso(end, "end")
        if e <= s:
            raise ValueError(f"end {end!r} must be after start {start!r}")
        bad = [a for a in attendees if "@" not in a]
        if bad:
            raise ValueError(f"attendees must be email addresses, got {bad}")
        events = self.events()
        ev = CalendarEvent(uid=f"evt-{len(events) + 1}@office.sandbox", title=title,
                           start=s.astimezone(UTC).isoformat(), end=e.astimezone(UTC).isoformat(),
                           attendees=tuple(a.strip() for a in attendees))
        self._write(events + [ev])
        return ev
