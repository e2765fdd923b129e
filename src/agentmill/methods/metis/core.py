"""MetisAgent.step — one task, top to bottom (the method as this project reads the paper's description [R]):

1. canonicalise the query to a pattern; count demand *before* the outcome is known (failures count) [S];
2. retrieve the active tool, the plan, facts and pitfalls for the plan's endpoints (cut to ``inject_max_tokens``);
3. act: the policy gets text memory as advice and the tool as a callable;
4. receive the outcome signal (the world's checker, or none);
5. distil: a plan only from a success, facts from API metadata and errors, pitfalls from remedies;
6. tool bookkeeping: record the use; demote after ``demote_failures`` failures in the last ``demote_window`` uses;
7. gate: codify iff no active tool, demand ≥ k, a plan with a success, and ``rebuild_after`` occurrences since the
   last rejection or demotion;
8. codify from the clean pattern, the plan and the facts (never the trajectory);
9. validate on snapshots and with a live probe; admit, or write a pitfall and keep text.
The ``code_naive`` baseline replaces 5–9 by transcribing every successful trajectory into an unvalidated tool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.tool_sandbox import ToolSandbox
from agentmill.envs.appsim import AppSim, CheckResult, Task, docs_before_shift, step_endpoints
from agentmill.methods.metis.baselines import TrajectoryTranscriber
from agentmill.methods.metis.canonical import PatternCanonicaliser
from agentmill.methods.metis.codify import Codifier
from agentmill.methods.metis.config import MetisConfig
from agentmill.methods.metis.distill import FIELD_SCHEMAS, LMDistiller, RuleDistiller
from agentmill.methods.metis.gate import RecurrenceGate
from agentmill.methods.metis.memory import MemoryStore
from agentmill.methods.metis.policy import LMPolicy, ScriptedPolicy
from agentmill.methods.metis.records import CodifyRequest, InstanceRef, Pitfall, Tool
from agentmill.methods.metis.toolbox import ToolLibrary, run_tool
from agentmill.methods.metis.validate import Validator


@dataclass
class StepRecord:
    """One task's outcome and costs (execution and build)."""

    t: int
    task_id: str
    key: str
    success: bool
    answer_ok: bool
    collateral: bool
    source: str
    llm_calls: int
    prompt_tokens: int
    output_tokens: int
    api_calls: int
    memory_tokens: int
    tool_id: str | None = None
    tool_error: str | None = None
    tool_accepted: bool = False
    codifier_calls: int = 0
    codifier_tokens: int = 0
    validation_replays: int = 0
    validation_api_calls: int = 0
    gate: str = ""
    built: str | None = None
    """``admitted`` | ``rejected`` | ``transcribed`` when a tool was built at this task."""
    demoted: str | None = None
    events: list[str] = field(default_factory=list)
    act: Any = field(default=None, repr=False)
    """The policy's :class:`ActResult` (not serialised)."""
    snapshot: bytes = field(default=b"", repr=False)
    """The world at the task's start (not serialised)."""


class MetisAgent:
    def __init__(self, config: MetisConfig, *, policy: ScriptedPolicy | LMPolicy,
                 distiller: RuleDistiller | LMDistiller,
                 codifier: Codifier, validator: Validator | None, store: MemoryStore, sandbox: ToolSandbox | None,
                 canonicaliser: PatternCanonicaliser, rng: np.random.Generator) -> None:
        self.config, self.policy, self.distiller, self.codifier = config, policy, distiller, codifier
        self.validator, self.store, self.sandbox, self.canon, self.rng = validator, store, sandbox, canonicaliser, rng
        self.gate = RecurrenceGate(config.gate_k, config.window, config.min_success_instances, config.rebuild_after)
        self.library = ToolLibrary(config.demote_failures, config.demote_window, demote=config.mode != "code_naive")
        self.transcriber = TrajectoryTranscriber()
        self.snapshots: dict[str, bytes] = {}

    def step(self, task: Task, env: AppSim, judge: Callable[[Any], CheckResult], t: int, *,
             learn: bool = True) -> StepRecord:
        """One task (module docstring). ``learn=False`` freezes memory: steps 5–9 are skipped."""
        cfg, store = self.config, self.store
        # 1. pattern; demand counted before the outcome
        pattern = self.canon.canonicalise(task.query)
        key = pattern.key
        self.gate.observe(key, t)
        # 2. retrieve
        plan = store.plan(key) if cfg.text_memory else None
        ctx = store.context_for(key, step_endpoints(plan.steps) if plan else [], max_tokens=cfg.inject_max_tokens,
                                text=cfg.text_memory, code=cfg.code_memory)
        # 3. act
        snapshot = env.snapshot()
        env.begin_task()
        api_before = env.api_calls
        tool = ctx.tool
        call_tool = None
        if tool is not None and self.sandbox is not None:
            def call_tool() -> tuple[Any, int]:
                return run_tool(self.sandbox, tool.source, tool.capabilities, pattern.values, env,
                                budget=cfg.tool_api_call_budget, wall_s=cfg.tool_wall_s)
        res = self.policy.act(reference=task.pattern.steps, pattern=pattern, env=env, ctx=ctx, store=store,
                              use_facts=cfg.text_memory, rng=self.rng, run_tool=call_tool,
                              verify=lambda a: judge(a).success, query=task.query)
        # 4. outcome signal
        chk = judge(res.answer)
        signal = chk.success if cfg.feedback == "oracle" else res.finished
        rec = StepRecord(t, task.task_id, key, chk.success, chk.answer_ok, chk.collateral, res.source,
                         res.llm_calls, res.prompt_tokens, res.output_tokens, env.api_calls - api_before, ctx.tokens,
                         res.tool_id, res.tool_error, res.tool_accepted, act=res, snapshot=snapshot)
        if not learn:
            return rec
        # 5. distil (text memory)
        instance = InstanceRef(task.task_id, tuple(sorted(pattern.values.items())), task.task_id, signal,
                               res.answer, env.state_digest())
        if cfg.text_memory:
            rec.events += self.distiller.distill(store, key=key, res=res, success=signal, instance=instance, t=t,
                                                 signature=pattern.signature, query=task.query)
            if signal:
                self.snapshots[task.task_id] = snapshot
                self._prune_snapshots()
        # 6. tool bookkeeping and demotion
        if tool is not None:
            ok = res.tool_error is None and res.tool_accepted and (chk.success if cfg.feedback == "oracle" else True)
            used = self.library.record_use(store.tool(tool.tool_id) or tool, ok)
            store.put_tool(used, t)
            if used.status == "demoted":
                rec.demoted = used.tool_id
                self.gate.block(key)
        # 7–9. gate, codify, validate (metis, eager) — or transcribe (code_naive)
        if cfg.mode in ("metis", "eager"):
            self._maybe_codify(key, pattern.signature, env, t, rec)
        elif cfg.mode == "code_naive" and signal and res.finished and res.source != "tool" and res.steps:
            self._transcribe(key, pattern.signature, res, t, rec)
        return rec

    def _maybe_codify(self, key: str, signature, env: AppSim, t: int, rec: StepRecord) -> None:
        store = self.store
        plan = store.plan(key)
        dec = self.gate.decide(key, t, has_active_tool=store.active_tool(key) is not None,
                               plan_successes=plan.succeeded if plan else None)
        rec.gate = dec.reason
        if not dec.codify or plan is None:
            return
        eps = step_endpoints(plan.steps)
        request = CodifyRequest(key, signature, plan.steps, tuple((e, docs_before_shift(e)) for e in eps),
                                tuple(f for f in store.facts() if f.subject in eps))
        source = self.codifier.codify(request)
        rec.codifier_calls += 1
        rec.codifier_tokens += (len(repr(request)) + len(source.source)) // 4
        assert self.validator is not None
        before = self.validator.replays
        report = self.validator.validate(source, list(plan.instances), env.snapshot(), self.snapshots.get)
        rec.validation_replays += self.validator.replays - before
        rec.validation_api_calls += report.api_calls
        version = self.library.next_version(key)
        tool = Tool(f"{_slug(key)}@v{version}", key, version, source.source, signature, source.capabilities,
                    "active" if report.passed else "rejected", report, built_at=t)
        store.put_tool(tool, t)
        rec.built = "admitted" if report.passed else "rejected"
        if not report.passed:
            why = report.reasons[0] if report.reasons else f"pass rate {report.pass_rate:.2f}"
            store.put_pitfall(Pitfall(key, "validation", r".", f"tool for {key} failed validation: {why}", "retry"),
                              t)
            self.gate.block(key)

    def _transcribe(self, key: str, signature, res, t: int, rec: StepRecord) -> None:
        def fields_used(ep: str, logical: str) -> tuple[str, float]:
            for e, meta in res.trace.metadata:
                if e == ep:
                    for name, scale in FIELD_SCHEMAS.get(ep, {}).get(logical, ()):
                        if name in meta.get("item_fields", []):
                            return name, scale
            return logical, 1.0

        source = self.transcriber.transcribe(res, key, fields_used)
        rec.codifier_calls += 1
        rec.codifier_tokens += len(source.source) // 4
        old = self.store.active_tool(key)
        if old is not None:
            self.store.put_tool(dataclasses.replace(old, status="superseded"), t)
        version = self.library.next_version(key)
        self.store.put_tool(Tool(f"{_slug(key)}@v{version}", key, version, source.source, signature,
                                 source.capabilities, "active", None, built_at=t), t)
        rec.built = "transcribed"

    def _prune_snapshots(self) -> None:
        keep = {i.snapshot_id for p in self.store.plans() for i in p.instances}
        for k in [k for k in self.snapshots if k not in keep]:
            del self.snapshots[k]


def _slug(key: str) -> str:
    import re

    return re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")[:64]
