"""Memory records: frozen dataclasses (pydantic is not a core dependency). The three kinds of text memory (plans,
facts, pitfalls) are the paper's [A]; every field is the project's schema [R]."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from agentmill.envs.appsim import Step

PlanStep = Step
"""The closed step language of :mod:`agentmill.envs.appsim` (login, call, list_all, filter, aggregate, mutate,
for_each, answer), so the LLM-free codifier can compile it."""

SLOT_TYPES = ("contact", "month", "date", "time", "amount", "product", "qty", "title", "text", "app_ref",
              "payment_method")


@dataclass(frozen=True)
class Pattern:
    """A canonical query pattern: ``key`` with typed slots and the slot values of one query."""

    key: str
    slots: tuple[tuple[str, str, Any], ...] = ()
    """(name, type, value) per slot, in order of appearance."""

    @property
    def values(self) -> dict[str, Any]:
        return {n: v for n, _, v in self.slots}

    @property
    def signature(self) -> tuple[tuple[str, str], ...]:
        return tuple((n, t) for n, t, _ in self.slots)


@dataclass(frozen=True)
class InstanceRef:
    """One run of a pattern: enough to replay it in validation (world snapshot id) and to compare (answer, end-state
    digest). Only successful instances carry expected outputs."""

    task_id: str
    slots: tuple[tuple[str, Any], ...]
    snapshot_id: str
    outcome: bool
    answer: Any
    state_digest: str


@dataclass(frozen=True)
class Plan:
    pattern_key: str
    steps: tuple[Step, ...]
    seen: int = 0
    succeeded: int = 0
    failed: int = 0
    last_used: int = -1
    instances: tuple[InstanceRef, ...] = ()


@dataclass(frozen=True)
class Fact:
    """An environment fact from API metadata, schemas or error messages (never from user-content fields)."""

    subject: str
    """``app`` or ``app.endpoint``."""
    key: str
    """``paginates``, ``page_limit_max``, ``field:amount`` …"""
    value: Any
    evidence: tuple[str, ...] = ()
    confidence: float = 1.0
    valid_from: int = 0
    superseded_by: int | None = None
    """Index (in the store's fact list) of the fact that replaced this one; facts are never deleted."""


@dataclass(frozen=True)
class Pitfall:
    """An error signature and the remedy that worked after it."""

    endpoint: str
    code: Any
    message_regex: str
    remedy: str
    """Text advice."""
    remedy_kind: str
    """``login`` | ``page_limit`` | ``read_docs`` | ``retry``: what the LLM-free agent does."""
    count: int = 1


@dataclass(frozen=True)
class ValidationReport:
    passed: bool
    pass_rate: float
    n_instances: int
    live_probe_ok: bool | None
    reasons: tuple[str, ...] = ()
    api_calls: int = 0


@dataclass(frozen=True)
class Tool:
    tool_id: str
    pattern_key: str
    version: int
    source: str
    signature: tuple[tuple[str, str], ...]
    capabilities: tuple[str, ...]
    status: str = "active"
    """``active`` | ``rejected`` | ``demoted``."""
    validation: ValidationReport | None = None
    uses: int = 0
    failures: int = 0
    recent: tuple[bool, ...] = ()
    """Outcomes (True = ok) of the last uses, newest last."""
    built_at: int = 0


@dataclass(frozen=True)
class ToolSource:
    source: str
    entry: str = "run"
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class CodifyRequest:
    """Everything a codifier sees: the clean pattern, the plan and the API knowledge — and no trajectory. A frozen
    dataclass without such a field: a codifier cannot be handed the messy run that produced the plan."""

    pattern_key: str
    signature: tuple[tuple[str, str], ...]
    plan_steps: tuple[Step, ...]
    api_docs: tuple[tuple[str, Any], ...] = ()
    """(endpoint, doc) the agent holds (its prior docs, updated by facts)."""
    facts: tuple[Fact, ...] = ()

    def __post_init__(self) -> None:
        names = {n for n, _ in self.signature}
        from agentmill.envs.appsim import SLOT_RE

        for s in self.plan_steps:
            for _, v in list(s.args) + (list(s.each.args) if s.each else []) + [("value", s.value)]:
                for m in SLOT_RE.finditer(v) if isinstance(v, str) else ():
                    if m.group(1) not in names:
                        raise ValueError(f"CodifyRequest: plan step {s.describe()} uses slot {{{m.group(1)}}} "
                                         f"missing from the signature {sorted(names)}; add it to the pattern")


@dataclass(frozen=True)
class MemoryEvent:
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    t: int = 0


def to_json(obj: Any) -> Any:
    """Records → JSON values (Steps via their dict form)."""
    if isinstance(obj, Step):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    return obj


def _tup(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_tup(v) for v in x)
    return x


def plan_from_json(d: dict) -> Plan:
    return Plan(d["pattern_key"], tuple(Step.from_dict(s) for s in d["steps"]), d["seen"], d["succeeded"],
                d["failed"], d["last_used"], tuple(InstanceRef(i["task_id"], _tup(i["slots"]), i["snapshot_id"],
                                                               i["outcome"], i["answer"],
                                                               i["state_digest"]) for i in d["instances"]))


def fact_from_json(d: dict) -> Fact:
    return Fact(d["subject"], d["key"], d["value"], tuple(d["evidence"]), d["confidence"], d["valid_from"],
                d["superseded_by"])


def pitfall_from_json(d: dict) -> Pitfall:
    return Pitfall(d["endpoint"], d["code"], d["message_regex"], d["remedy"], d["remedy_kind"], d["count"])


def tool_from_json(d: dict) -> Tool:
    v = d.get("validation")
    rep = ValidationReport(v["passed"], v["pass_rate"], v["n_instances"], v["live_probe_ok"], tuple(v["reasons"]),
                           v["api_calls"]) if v else None
    return Tool(d["tool_id"], d["pattern_key"], d["version"], d["source"], _tup(d["signature"]),
                tuple(d["capabilities"]), d["status"], rep, d["uses"], d["failures"], tuple(d["recent"]),
                d["built_at"])
