"""The office domain adapter: tool calls against ``envs.office.OfficeSandbox`` (docs/methods/world_model.md).

An office transition is one tool call: the action is the call as ``{"name", "arguments"}`` JSON (the tool's schema
names, ``envs/office/tools.py``), the observation is the sandbox's plain-text tool output, or ``ERROR: …`` when the
call is refused or fails (``ToolResult.content()``). The first observation of an episode is the drive's root
listing. Outputs have a few fixed shapes, recognised from the text alone: a ticket listing, an event listing, a
directory listing, an SQL result table, a one-line confirmation (wrote / moved / deleted / ticket updated / event
created / rows changed), an error, or free text (a file's content). Facts are (entity, attribute, value) triples of
those shapes — ``("T-1003", "status", "open")``, ``("evt-6@office.sandbox", "title", "Sync")``, ``("row2", "tier",
"plus")`` — and one ``("file", "line", …)`` fact per line of free text.

The card is the fixture digest [R content]: the company domain, every file on the drive, every ticket with its
status, every calendar event id and the database names. The reasoning and ``changed`` come from the sandbox state
diff (files by hash, tickets by status and note count, events, database content hashes) before and after the call.

Transitions come from a seeded schema-driven behaviour policy over the spec's ten tools (``TOOLS``) [R mix]: 20 %
invalid calls (an unknown id or path, an argument of the wrong type, a missing required argument), 20 %
write-then-read pairs (``write_file`` of a new file in an existing directory, then ``read_file`` of it), and the rest
valid calls on existing ids and paths. Episodes are cached under ``core.paths.cache_root()/world_model/``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.core.seeding import derive_seed
from agentmill.methods.world_model.data import Transition, TransitionTable
from agentmill.methods.world_model.domain import CHECKS, Parsed

OFFICE_VERSION = "1"
"""Bumped whenever collection or rendering here changes, so cached transitions are never served to newer code."""

TOOLS = ("list_dir", "read_file", "write_file", "delete_file", "move_file", "sql_query", "list_tickets",
         "update_ticket", "create_event", "list_events")
"""The tools the office world model sees (the design's ``OfficeToolEnv`` list)."""
STATUSES = ("open", "pending", "resolved", "closed")
GOAL = "Keep the shared drive tidy, triage the helpdesk tickets and plan this week's meetings."
"""The office request given as the task instruction of every episode [R]."""
P_INVALID, P_WRITE_READ = 0.2, 0.2
"""Behaviour mix [R, the design's 20 % invalid / 20 % write-then-read / 60 % valid on existing ids]."""

_TICKET = re.compile(r"^(T-\d+) \[([a-z]+)\] (.+?): (.*) \(paid \$(\d+\.\d\d)\)$")
_EVENT = re.compile(r"^(\S+@\S+) \| (\S+) - (\S+) \| (.*?) \|(?: (.*))?$")
_DIR_FILE = re.compile(r"^(.+) \((\d+) bytes\)$")
_DIR_LINK = re.compile(r"^(.+) \(symlink\)$")
_DIR_SUB = re.compile(r"^([^\s/][^/]*)/$")
_ROWS = re.compile(r"^\((\d+) row\(s\)\)$")
_MORE = re.compile(r"^\.\.\. more than \d+ rows; add LIMIT$")
_CONFIRM = (
    ("wrote", re.compile(r"^Wrote (\d+) bytes to (.+)\.$")),
    ("moved", re.compile(r"^Moved (.+) -> (.+)\.$")),
    ("deleted_ticket", re.compile(r"^Deleted ticket (T-\d+)\.$")),
    ("deleted", re.compile(r"^Deleted (.+)\.$")),
    ("ticket", re.compile(r"^Ticket (T-\d+): status ([a-z]+), (\d+) note\(s\)\.$")),
    ("event", re.compile(r"^Created event (\S+): (.*) (\S+) - (\S+) with \[(.*)\]\.$")),
    ("sql_changed", re.compile(r"^OK, (\d+) row\(s\) changed\.$")),
)
_MARKUP = ("<predicted_observation>", "</predicted_observation>", "<think>", "</think>", "**Environment Observation:**")
_EVT_ID = re.compile(r"^evt-\d+@office\.sandbox$")


def action_string(name: str, arguments: dict[str, Any]) -> str:
    """The canonical action string of a tool call (sorted-key JSON)."""
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True)


def action_json(action: str) -> dict[str, Any]:
    """An office action string as ``{"name", "arguments"}`` (a text that is not such JSON becomes a command)."""
    try:
        obj = json.loads(action)
    except ValueError:
        return {"name": "command", "arguments": {"text": action}}
    if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(obj.get("arguments"), dict):
        return {"name": obj["name"], "arguments": obj["arguments"]}
    return {"name": "command", "arguments": {"text": action}}


def _iso_ok(a: str, b: str) -> bool:
    try:
        return datetime.fromisoformat(a) < datetime.fromisoformat(b)
    except ValueError:
        return False


@lru_cache(maxsize=65536)
def parse_office(obs: str) -> Parsed:
    """Typed fields and facts of an office tool output. Every text parses (free text is a file's content), so
    ``fields["kind"]`` says which shape was recognised."""
    lines = tuple(ln.rstrip() for ln in obs.strip().splitlines() if ln.strip())
    facts: set[tuple[str, str, str]] = set()
    if not lines:
        return Parsed({"kind": "empty"}, frozenset({("output", "empty", "yes")}), lines)
    if lines[0].startswith("ERROR: "):
        msg = " ".join(ln.strip() for ln in lines)[len("ERROR: "):]
        tool = msg.split(":", 1)[0] if ":" in msg else ""
        return Parsed({"kind": "error", "message": msg, "tool": tool},
                      frozenset({("tool", "error", msg)}), lines)
    if lines == ("(no tickets)",) or all(_TICKET.match(ln) for ln in lines):
        rows = [_TICKET.match(ln).groups() for ln in lines if _TICKET.match(ln)]  # type: ignore[union-attr]
        for tid, st, cust, subj, paid in rows:
            facts |= {(tid, "status", st), (tid, "customer", cust), (tid, "subject", subj), (tid, "paid", paid)}
        return Parsed({"kind": "tickets", "tickets": rows}, frozenset(facts or {("tickets", "list", "none")}), lines)
    if lines == ("(no events)",) or all(_EVENT.match(ln) for ln in lines):
        rows = [_EVENT.match(ln).groups("") for ln in lines if _EVENT.match(ln)]  # type: ignore[union-attr]
        for uid, start, end, title, att in rows:
            facts |= {(uid, "start", start), (uid, "end", end), (uid, "title", title)}
            facts |= {(uid, "attendee", a.strip()) for a in att.split(",") if a.strip()}
        return Parsed({"kind": "events", "events": rows}, frozenset(facts or {("events", "list", "none")}), lines)
    if len(lines) == 1:
        for name, rx in _CONFIRM:
            m = rx.match(lines[0])
            if m:
                g = m.groups()
                facts = {"wrote": lambda: {(g[1], "written", g[0])},
                         "moved": lambda: {(g[0], "moved to", g[1])},
                         "deleted_ticket": lambda: {(g[0], "deleted", "yes")},
                         "deleted": lambda: {(g[0], "deleted", "yes")},
                         "ticket": lambda: {(g[0], "status", g[1]), (g[0], "notes", g[2])},
                         "event": lambda: {(g[0], "title", g[1]), (g[0], "start", g[2]), (g[0], "end", g[3])}
                         | {(g[0], "attendee", a.strip().strip("'\"")) for a in g[4].split(",") if a.strip()},
                         "sql_changed": lambda: {("sql", "changed", g[0])}}[name]()
                return Parsed({"kind": "confirm", "confirm": name, "groups": g}, frozenset(facts), lines)
    if len(lines) >= 2 and _ROWS.match(lines[-1]):
        header = lines[0].split("\t")
        body = [ln for ln in lines[1:-1] if not _MORE.match(ln)]
        rows = [ln.split("\t") for ln in body]
        for i, r in enumerate(rows):
            facts |= {(f"row{i + 1}", c, v) for c, v in zip(header, r)}
        facts.add(("sql", "rows", _ROWS.match(lines[-1]).group(1)))  # type: ignore[union-attr]
        return Parsed({"kind": "sql", "header": header, "rows": rows, "more": len(body) < len(lines) - 2,
                       "count": int(_ROWS.match(lines[-1]).group(1))}, frozenset(facts), lines)  # type: ignore
    if lines == ("(empty)",) or all(_DIR_FILE.match(ln) or _DIR_LINK.match(ln) or _DIR_SUB.match(ln)
                                     for ln in lines):
        entries = []
        for ln in lines:
            if ln == "(empty)":
                continue
            m = _DIR_FILE.match(ln)
            if m:
                entries.append((m.group(1), m.group(2)))
            elif _DIR_LINK.match(ln):
                entries.append((_DIR_LINK.match(ln).group(1), "symlink"))  # type: ignore[union-attr]
            else:
                entries.append((ln[:-1], "dir"))
        facts = {(n, "listed", v) for n, v in entries} or {("dir", "listed", "empty")}
        return Parsed({"kind": "dir", "entries": entries}, frozenset(facts), lines)
    return Parsed({"kind": "text"}, frozenset(("file", "line", ln.strip()) for ln in lines), lines)


@lru_cache(maxsize=1024)
def _card_sections(card: str | None) -> dict[str, set[str]]:
    """Files, ticket ids, event ids and directory names of a card (cached: cards repeat across items; read-only)."""
    out: dict[str, set[str]] = {"file": set(), "ticket": set(), "event": set(), "dirs": set()}
    for ln in (card or "").splitlines():
        key, _, rest = ln.partition(": ")
        if key == "file":
            out["file"].add(rest)
            parts = rest.split("/")[:-1]
            out["dirs"] |= set(parts)
        elif key == "ticket":
            out["ticket"].add(rest.split(" ")[0])
        elif key == "event":
            out["event"].add(rest)
    return out


class OfficeDomain:
    """Office tool outputs for the world model (module docstring)."""

    name = "office"
    qwen_domain = "mcp"  # tool calls against a stateful backend: the MCP domain of the Qwen release [C prompts/mcp]

    # ---- card ----------------------------------------------------------------------------------------------------
    def card(self, sandbox: Any) -> str:
        """Fixture digest of a freshly reset sandbox: domain, files, tickets with statuses, event ids, databases."""
        fx = sandbox.fixtures
        lines = [f"company: {fx.company_domain}"]
        lines += [f"file: {p}" for p in drive_files(sandbox)]
        lines += [f"ticket: {t['ticket_id']} [{t['status']}]" for t in fx.tickets]
        lines += [f"event: {e['uid']}" for e in fx.events]
        lines.append("databases: prod, staging")
        return "\n".join(lines)

    # ---- parsing ---------------------------------------------------------------------------------------------------
    def parse(self, obs: str) -> Parsed | None:
        return parse_office(obs)

    def schema_checks(self, p: Parsed) -> list[bool]:
        """Shape checks per output kind [R]; free text must carry none of the world model's own markup."""
        f = p.fields
        k = f["kind"]
        if k == "error":
            return [bool(f["message"].strip()), f["tool"] in TOOLS or f["message"].startswith("unknown tool")]
        if k == "tickets":
            return [all(t[1] in STATUSES for t in f["tickets"]), len({t[0] for t in f["tickets"]}) == len(f["tickets"])]
        if k == "events":
            return [all(_iso_ok(e[1], e[2]) for e in f["events"]), len({e[0] for e in f["events"]}) == len(f["events"])]
        if k == "dir":
            names = [n for n, _ in f["entries"]]
            return [names == sorted(names), len(set(names)) == len(names)]
        if k == "sql":
            return [all(len(r) == len(f["header"]) for r in f["rows"]), f["more"] or f["count"] == len(f["rows"])]
        if k == "confirm" and f["confirm"] == "event":
            return [_iso_ok(f["groups"][2], f["groups"][3])]
        if k == "confirm" and f["confirm"] == "ticket":
            return [f["groups"][1] in STATUSES]
        return [not any(m in ln for ln in p.lines for m in _MARKUP)]

    def plausibility_checks(self, p: Parsed, card: str | None, window: Sequence[str]) -> list[bool]:
        """Referential integrity against the card [R]: ticket ids are the card's (no tool creates tickets), event
        ids are the card's or the sandbox's counter form, listed directories exist in the card, a written or
        moved path stays under a top-level directory of the drive."""
        if not card:
            return [True]
        c = _card_sections(card)
        f = p.fields
        k = f["kind"]
        if k == "tickets":
            return [t[0] in c["ticket"] for t in f["tickets"]] or [True]
        if k == "events":
            return [e[0] in c["event"] or bool(_EVT_ID.match(e[0])) for e in f["events"]] or [True]
        if k == "dir":
            return [n in c["dirs"] or n == "data" for n, v in f["entries"] if v == "dir"] or [True]
        if k == "confirm":
            g, name = f["groups"], f["confirm"]
            if name in ("ticket", "deleted_ticket"):
                return [g[0] in c["ticket"]]
            if name == "event":
                return [g[0] in c["event"] or bool(_EVT_ID.match(g[0]))]
            paths = [g[1]] if name == "wrote" else [g[0], g[1]] if name == "moved" else [g[0]] \
                if name == "deleted" else []
            top = {x.split("/")[0] for x in c["file"]} | {"data"}
            return [x.split("/")[0] in top or "/" not in x for x in paths] or [True]
        return [True]

    def consistency_conflicts(self, p: Parsed, window: Sequence[str]) -> tuple[int, int]:
        """(conflicts, checked): a ticket listed in the window keeps its customer, subject and amount; an event
        keeps its title and times (no tool edits them) [R]."""
        conflicts = checked = 0
        f = p.fields
        for w in window:
            q = parse_office(w)
            if f["kind"] == "tickets" and q.fields["kind"] == "tickets":
                before = {t[0]: (t[2], t[3], t[4]) for t in q.fields["tickets"]}
                for t in f["tickets"]:
                    if t[0] in before:
                        checked += 1
                        conflicts += before[t[0]] != (t[2], t[3], t[4])
            if f["kind"] == "events" and q.fields["kind"] == "events":
                before = {e[0]: e[1:4] for e in q.fields["events"]}
                for e in f["events"]:
                    if e[0] in before:
                        checked += 1
                        conflicts += before[e[0]] != e[1:4]
        return conflicts, checked

    # ---- reasoning -------------------------------------------------------------------------------------------------
    def reasoning(self, action: str, obs: str, next_obs: str, diff: Sequence[str], check: int | None) -> str:
        """Action (the call restated), Preconditions (whether the sandbox accepts it, read from the result),
        Effects (the state diff, in words), Check (``check`` indexes the shared pool; None drops it) [R]."""
        a = action_json(action)
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(a["arguments"].items())) or "no arguments"
        p = parse_office(next_obs)
        pre = (f"the call is refused ({p.fields['message']})" if p.fields["kind"] == "error"
               else "the call is valid for the current office state")
        lines = [f"Action: call {a['name']} with {args}.", f"Preconditions: {pre}.",
                 "Effects: " + ("; ".join(diff) if diff else "no state change") + "."]
        if check is not None:
            lines.append(CHECKS[check % len(CHECKS)])
        return "\n".join(lines)

    # ---- simulator hooks -------------------------------------------------------------------------------------------
    def outcome_from_observation(self, obs: str, action: str) -> tuple[float, bool]:
        """The office has no task verifier here: no reward, no termination (episodes end by step limit) [R]."""
        return 0.0, False

    def admissible_from_text(self, obs: str, card: str | None) -> list[str]:
        """Listing calls, plus ``read_file`` for every file a (simulated) directory listing shows (paths relative
        to the listed directory are unknown from the text: names are used as given)."""
        out = {action_string(t, {}) for t in ("list_dir", "list_events", "list_tickets")}
        p = parse_office(obs)
        if p.fields["kind"] == "dir":
            out |= {action_string("read_file", {"path": n}) for n, v in p.fields["entries"] if v.isdigit()}
        return sorted(out)

    # ---- corruption (M-2) ------------------------------------------------------------------------------------------
    def corrupt(self, obs: str, k: int, rng: np.random.Generator) -> str:
        """``obs`` with ``k`` of its content lines replaced by phantom lines of the same shape (an SQL header is
        kept). The replacement of line i depends only on i, and ``rng`` orders the lines, so with the same ``rng``
        seed the corruption at k + 1 adds one line to the corruption at k and factuality can only fall."""
        p = parse_office(obs)
        lines = list(p.lines)
        kind = p.fields["kind"]
        slots = list(range(1, len(lines))) if kind == "sql" else list(range(len(lines)))
        order = rng.permutation(len(slots))[:k] if slots else []
        if not slots and k > 0:
            return "Phantom line 0."
        for s in order:
            i = slots[int(s)]
            lines[i] = _phantom(kind, p, i)
        return "\n".join(lines)


def _phantom(kind: str, p: Parsed, i: int) -> str:
    if kind == "tickets":
        return f"T-9{i:03d} [closed] Zed Phantom: Phantom entry {i} (paid $0.{i % 100:02d})"
    if kind == "events":
        return (f"phantom-{i}@office.sandbox | 2030-01-0{1 + i % 9}T09:00:00+00:00 - 2030-01-0{1 + i % 9}T10:00:00"
                f"+00:00 | Phantom {i} | nobody@phantom.example")
    if kind == "dir":
        return f"phantom-{i}.tmp ({900 + i} bytes)"
    if kind == "sql":
        if _ROWS.match(p.lines[i]):
            return f"({900 + i} row(s))"
        return "\t".join(f"phantom{i}" for _ in p.fields["header"])
    if kind == "error":
        return f"ERROR: {p.fields['tool'] or 'read_file'}: phantom failure {i}"
    if kind == "confirm":
        return f"Wrote {900 + i} bytes to phantom/phantom-{i}.txt."
    return f"Phantom line {i}."


# ---------------------------------------------------------------------------------------------------------------
# state diff, behaviour policy, collection and cache

def _office():
    try:
        from agentmill.envs.office import OfficeSandbox
    except ImportError as exc:
        raise ImportError("office transitions need the office sandbox: pip install 'agentmill[constraint-rot]'"
                          ) from exc
    return OfficeSandbox


STORES = {"write_file": "files", "delete_file": "files", "move_file": "files", "sql_query": "db",
          "update_ticket": "tickets", "create_event": "events"}
"""The one store each state-changing tool can touch (the other four tools only read)."""


def office_state(sb: Any, stores: Sequence[str] = ("files", "tickets", "events", "db")) -> dict[str, Any]:
    """What the ten tools can change: drive files by hash (databases excluded), tickets by status and note count,
    events, database content hashes; only the named ``stores`` are read (hashing every store around every call
    costs ≈ 30 ms), the others are empty."""
    from agentmill.envs.office import db as dbmod

    out: dict[str, Any] = {"files": {}, "tickets": {}, "events": {}, "db": {}}
    if "files" in stores:
        out["files"] = {p: h for p, h in sb.jail.snapshot().items() if not p.startswith("data/")}
    if "tickets" in stores:
        out["tickets"] = {t.ticket_id: (t.status, len(t.notes)) for t in sb.ticket_store.tickets()}
    if "events" in stores:
        out["events"] = {e.uid: e.title for e in sb.calendar.events()}
    if "db" in stores:
        out["db"] = {n: dbmod.summary(sb.drive / "data" / f"{n}.db")["sha256"] for n in dbmod.DATABASES}
    return out


def state_diff(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The privileged state change in words, sorted within each store."""
    out = []
    bf, af = before["files"], after["files"]
    out += [f"file {p} is created" for p in sorted(set(af) - set(bf))]
    out += [f"file {p} is removed" for p in sorted(set(bf) - set(af))]
    out += [f"file {p} changes content" for p in sorted(set(af) & set(bf)) if af[p] != bf[p]]
    for tid in sorted(after["tickets"]):
        b, a = before["tickets"].get(tid), after["tickets"][tid]
        if b is not None and b[0] != a[0]:
            out.append(f"ticket {tid} status {b[0]} -> {a[0]}")
        if b is not None and b[1] != a[1]:
            out.append(f"ticket {tid} gains a note")
    out += [f"event {u} ({after['events'][u]}) is added" for u in sorted(set(after["events"]) - set(before["events"]))]
    out += [f"database {n} content changes" for n in sorted(after["db"]) if after["db"][n] != before["db"].get(n)]
    return out


_TITLES = ("Sync", "Budget review", "Customer call", "Planning", "Retro", "Hiring panel")
_NOTES = ("Customer contacted.", "Waiting for logs.", "Escalated to billing.", "Duplicate of an older ticket.")
_SELECTS = ("SELECT id, name, tier FROM customers ORDER BY id LIMIT 3", "SELECT COUNT(*) AS n FROM orders",
            "SELECT id, customer_id, status FROM orders ORDER BY id LIMIT 4",
            "SELECT tier, COUNT(*) AS n FROM customers GROUP BY tier ORDER BY tier")
_WRITES = ("UPDATE orders SET status = 'shipped' WHERE id = 1", "DELETE FROM audit_log WHERE id = 1")


def drive_files(sb: Any) -> list[str]:
    """Drive-relative paths of the regular files on the drive, databases excluded, sorted."""
    root = sb.jail.root
    return sorted(p for p in (f.relative_to(root).as_posix() for f in root.rglob("*") if f.is_file()
                              and not f.is_symlink()) if not p.startswith("data/"))


def _valid_call(sb: Any, rng: np.random.Generator, n: int, files: list[str]) -> tuple[str, dict[str, Any]]:
    """One schema-valid call on existing ids and paths (moves go to existing directories)."""
    dirs = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
    tickets = [t.ticket_id for t in sb.ticket_store.tickets()]
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    tool = pick(("list_dir", "read_file", "delete_file", "move_file", "sql_query", "list_tickets", "update_ticket",
                 "create_event", "list_events"))
    if tool == "list_dir":
        return tool, {"path": pick(["."] + dirs)}
    if tool == "read_file" or (tool in ("delete_file", "move_file") and not files):
        return "read_file", {"path": pick(files)} if files else {"path": "README.md"}
    if tool == "delete_file":
        return tool, {"path": pick(files)}
    if tool == "move_file":
        src = pick(files)
        return tool, {"src": src, "dst": f"{pick(dirs)}/moved-{n}-{src.rsplit('/', 1)[-1]}"}
    if tool == "sql_query":
        if rng.random() < 0.25:
            return tool, {"db": "staging", "sql": pick(_WRITES)}
        return tool, {"db": pick(("prod", "staging")), "sql": pick(_SELECTS)}
    if tool == "list_tickets":
        return tool, {"status": pick(STATUSES)} if rng.random() < 0.5 else {}
    if tool == "update_ticket":
        args: dict[str, Any] = {"ticket_id": pick(tickets), "status": pick(STATUSES)}
        if rng.random() < 0.5:
            args["note"] = pick(_NOTES)
        return tool, args
    if tool == "create_event":
        start = sb.clock + timedelta(days=int(rng.integers(1, 6)), hours=int(rng.integers(0, 7)))
        end = start + timedelta(minutes=30 * int(rng.integers(1, 4)))
        return tool, {"title": pick(_TITLES), "start": start.isoformat(), "end": end.isoformat()}
    return "list_events", {}


def _invalid_call(sb: Any, rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
    """An unknown id or path, an argument of the wrong type, or a missing required argument."""
    kind = int(rng.integers(3))
    if kind == 0:
        return [("read_file", {"path": "projects/missing/plan.txt"}),
                ("update_ticket", {"ticket_id": "T-9999", "status": "closed"}),
                ("delete_file", {"path": "reports/old.csv"}),
                ("list_dir", {"path": "private"})][int(rng.integers(4))]
    if kind == 1:
        return [("read_file", {"path": 42}), ("update_ticket", {"ticket_id": 1001}),
                ("sql_query", {"db": "prod", "sql": ["SELECT 1"]})][int(rng.integers(3))]
    return [("read_file", {}), ("write_file", {"path": "notes.txt"}),
            ("create_event", {"title": "Sync", "start": sb.clock.isoformat()})][int(rng.integers(3))]


def collect_office(tasks: Sequence[tuple[int, str]], episodes: int, *, max_steps: int = 10,
                   seed: int = 0) -> TransitionTable:
    """Transitions of ``episodes`` behaviour episodes per (fixture seed, split) task (module docstring)."""
    from agentmill.core.types import ToolCall

    dom = OfficeDomain()
    rows: list[Transition] = []
    sb = _office()(int(tasks[0][0]) if tasks else 0, smtp=False, http=False)
    try:
        for fseed, split in tasks:
            tid = f"office-{fseed}"
            for e in range(episodes):
                sb.reset(int(fseed))
                card = dom.card(sb)
                rng = np.random.default_rng(derive_seed(seed, "wm-office", tid, e))
                obs = sb.execute(ToolCall("c0", "list_dir", {"path": "."})).content()
                files = drive_files(sb)
                pending: str | None = None
                for t in range(max_steps):
                    if pending is not None:
                        name, args, pending = "read_file", {"path": pending}, None
                    else:
                        u = rng.random()
                        if u < P_INVALID:
                            name, args = _invalid_call(sb, rng)
                        elif u < P_INVALID + P_WRITE_READ and t + 1 < max_steps:
                            dirs = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
                            path = f"{dirs[int(rng.integers(len(dirs)))]}/note-{e}-{t}.txt"
                            name, args = "write_file", {"path": path, "content": _NOTES[int(rng.integers(4))]}
                            pending = path
                        else:
                            name, args = _valid_call(sb, rng, t, files)
                    stores = (STORES[name],) if name in STORES else ()
                    before = office_state(sb, stores)
                    res = sb.execute(ToolCall(f"c{t + 1}", name, args))
                    nobs = res.content()
                    diff = state_diff(before, office_state(sb, stores))
                    rows.append(Transition("office", tid, split, f"{tid}/e{e}", t, GOAL, obs,
                                           action_string(name, args), nobs, 0.0, False, t + 1 >= max_steps,
                                           bool(diff), not res.ok, tuple(diff), card, int(fseed)))
                    obs = nobs
                    if res.ok and STORES.get(name) == "files":
                        files = drive_files(sb)
    finally:
        sb.close()
    return TransitionTable(rows)


def office_table(tasks: Sequence[tuple[int, str]], episodes: int, *, max_steps: int = 10,
                 seed: int = 0) -> TransitionTable:
    """:func:`collect_office`, cached by (version, tasks, episodes, max_steps, seed)."""
    blob = json.dumps([OFFICE_VERSION, [(int(s), str(sp)) for s, sp in tasks], episodes, max_steps, seed])
    key = hashlib.sha256(blob.encode()).hexdigest()[:12]
    path = cache_root() / "world_model" / f"office-v{OFFICE_VERSION}" / key / "transitions.jsonl"
    if path.exists():
        return TransitionTable.from_jsonl(path)
    table = collect_office(tasks, episodes, max_steps=max_steps, seed=seed)
    table.to_jsonl(path)
    return table
