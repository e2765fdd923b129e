"""MemoryStore: event-sourced memory. Every change is a :class:`MemoryEvent` applied to in-memory views; with a
``root`` each event is first appended (and fsynced) to ``ledger.jsonl`` through :class:`agentmill.core.ledger.Ledger`,
so :meth:`MemoryStore.replay` rebuilds the same views. Facts are versioned (``superseded_by``), never deleted."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.methods.metis.records import (Fact, MemoryEvent, Pitfall, Plan, Tool, fact_from_json,
                                             pitfall_from_json, plan_from_json, to_json, tool_from_json)

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class MemoryContext:
    """What one task is given: the tool (if active), the plan, facts and pitfalls, and their token cost."""

    tool: Tool | None
    plan: Plan | None
    facts: tuple[Fact, ...]
    pitfalls: tuple[Pitfall, ...]
    tokens: int

    def render(self) -> str:
        parts = []
        if self.plan is not None:
            parts.append("PLAN (advice, check against the API):\n" + "\n".join(
                f"{i + 1}. {s.describe()}" for i, s in enumerate(self.plan.steps)))
        if self.facts:
            parts.append("FACTS:\n" + "\n".join(f"- {f.subject} {f.key} = {f.value}" for f in self.facts))
        if self.pitfalls:
            parts.append("PITFALLS:\n" + "\n".join(f"- {p.endpoint} {p.code}: {p.remedy}" for p in self.pitfalls))
        return "\n\n".join(parts)


class MemoryStore:
    """Plans by pattern key, facts (all versions), pitfalls by signature, tools by id; ``root=None`` keeps it in
    memory only (streams in experiments), otherwise ``root/ledger.jsonl`` (hash-chained, fsynced per event)."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else None
        self._plans: dict[str, Plan] = {}
        self._facts: list[Fact] = []
        self._current: dict[tuple[str, str], int] = {}
        self._pitfalls: dict[tuple[str, Any, str], Pitfall] = {}
        self._tools: dict[str, Tool] = {}
        self.events: list[MemoryEvent] = []
        self.ledger = None
        if self.root is not None:
            from agentmill.core.ledger import Ledger

            self.ledger = Ledger(self.root, run_id="metis")
            for ev in self.ledger.events:
                p = self.ledger.payload(ev)
                self._update(MemoryEvent(ev["kind"], p["payload"], p["t"]))

    # -- writing ------------------------------------------------------------------------------------------------------
    def apply(self, event: MemoryEvent) -> None:
        """Append (durably, with a root) and then update the views."""
        if self.ledger is not None:
            self.ledger.append(event.kind, f"e{len(self.events)}", {"payload": event.payload, "t": event.t})
        self._update(event)

    def _update(self, e: MemoryEvent) -> None:
        self.events.append(e)
        p = e.payload
        if e.kind == "plan":
            plan = plan_from_json(p)
            self._plans[plan.pattern_key] = plan
        elif e.kind == "fact":
            f = fact_from_json(p)
            cur = self._current.get((f.subject, f.key))
            if cur is not None:
                self._facts[cur] = dataclasses.replace(self._facts[cur], superseded_by=len(self._facts))
            self._current[(f.subject, f.key)] = len(self._facts)
            self._facts.append(f)
        elif e.kind == "pitfall":
            pf = pitfall_from_json(p)
            sig = (pf.endpoint, pf.code, pf.message_regex)
            old = self._pitfalls.get(sig)
            self._pitfalls[sig] = pf if old is None else dataclasses.replace(old, count=old.count + 1)
        elif e.kind == "tool":
            t = tool_from_json(p)
            self._tools[t.tool_id] = t
        elif e.kind in ("gate", "note"):
            pass
        else:
            raise ValueError(f"unknown memory event kind {e.kind!r}")

    def put_plan(self, plan: Plan, t: int) -> None:
        self.apply(MemoryEvent("plan", to_json(plan), t))

    def put_fact(self, fact: Fact, t: int) -> bool:
        """Record ``fact`` unless the current fact for its (subject, key) already has its value; a new value
        supersedes the old fact. Returns whether an event was written."""
        cur = self._current.get((fact.subject, fact.key))
        if cur is not None and self._facts[cur].value == fact.value:
            return False
        self.apply(MemoryEvent("fact", to_json(fact), t))
        return True

    def put_pitfall(self, pitfall: Pitfall, t: int) -> None:
        self.apply(MemoryEvent("pitfall", to_json(pitfall), t))

    def put_tool(self, tool: Tool, t: int) -> None:
        self.apply(MemoryEvent("tool", to_json(tool), t))

    # -- reading ------------------------------------------------------------------------------------------------------
    def plan(self, key: str) -> Plan | None:
        return self._plans.get(key)

    def plans(self) -> list[Plan]:
        return list(self._plans.values())

    def facts(self, current_only: bool = True) -> list[Fact]:
        return [f for f in self._facts if f.superseded_by is None or not current_only]

    def fact(self, subject: str, key: str) -> Fact | None:
        i = self._current.get((subject, key))
        return None if i is None else self._facts[i]

    def pitfalls(self) -> list[Pitfall]:
        return list(self._pitfalls.values())

    def tools(self, status: str | None = "active") -> list[Tool]:
        return [t for t in self._tools.values() if status is None or t.status == status]

    def tool(self, tool_id: str) -> Tool | None:
        return self._tools.get(tool_id)

    def active_tool(self, key: str) -> Tool | None:
        for t in self._tools.values():
            if t.pattern_key == key and t.status == "active":
                return t
        return None

    def context_for(self, key: str, endpoints: list[str], *, max_tokens: int, text: bool = True,
                    code: bool = True) -> MemoryContext:
        """Tool, plan, facts about the plan's endpoints (or the query's apps), pitfalls of those endpoints, cut to
        ``max_tokens`` (plan first, then pitfalls, then facts)."""
        tool = self.active_tool(key) if code else None
        if not text:
            return MemoryContext(tool, None, (), (), 0)
        plan = self._plans.get(key)
        eps = set(endpoints)
        apps = {e.split(".")[0] for e in eps}
        facts = [f for f in self.facts() if f.subject in eps or f.subject in apps]
        pits = [p for p in self._pitfalls.values() if p.endpoint in eps or p.endpoint.split(".")[0] in apps
                or p.code == 401]
        budget = max_tokens * CHARS_PER_TOKEN
        used = 0
        if plan is not None:
            used += sum(len(s.describe()) + 4 for s in plan.steps)
        keep_p, keep_f = [], []
        for p in pits:
            n = len(p.endpoint) + len(p.remedy) + 12
            if used + n <= budget:
                keep_p.append(p)
                used += n
        for f in facts:
            n = len(f.subject) + len(f.key) + len(str(f.value)) + 8
            if used + n <= budget:
                keep_f.append(f)
                used += n
        return MemoryContext(tool, plan, tuple(keep_f), tuple(keep_p), min(used, budget) // CHARS_PER_TOKEN)

    def snapshot_dict(self) -> dict[str, Any]:
        """The views as JSON (what ``snapshot.json`` holds; :meth:`replay` must reproduce it)."""
        return {"plans": {k: to_json(v) for k, v in sorted(self._plans.items())},
                "facts": [to_json(f) for f in self._facts],
                "pitfalls": [to_json(p) for _, p in sorted(self._pitfalls.items(), key=lambda kv: repr(kv[0]))],
                "tools": {k: to_json(v) for k, v in sorted(self._tools.items())}}

    def write_snapshot(self) -> Path | None:
        if self.root is None:
            return None
        from agentmill.core.records import write_json_atomic

        return write_json_atomic(self.root / "snapshot.json", self.snapshot_dict())

    @classmethod
    def replay(cls, root: Path | str) -> MemoryStore:
        """Rebuild from ``root/ledger.jsonl`` (the ledger): equal to the snapshot written by the run."""
        return cls(root)
