"""run_stream: one agent over one task stream, with per-task rows and the slices the claims read."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentmill.core.seeding import rng_for
from agentmill.envs.appsim import AppSim, TaskStream, affected, check, expected_outcome
from agentmill.methods.metis.canonical import PatternCanonicaliser
from agentmill.methods.metis.codify import CompileCodifier, LMCodifier
from agentmill.methods.metis.config import MetisConfig, ScriptedPolicyConfig
from agentmill.methods.metis.core import MetisAgent, StepRecord
from agentmill.methods.metis.records import InstanceRef
from agentmill.methods.metis.distill import LMDistiller, RuleDistiller
from agentmill.methods.metis.memory import MemoryStore
from agentmill.methods.metis.policy import LMPolicy, ScriptedPolicy
from agentmill.methods.metis.toolbox import make_sandbox
from agentmill.methods.metis.validate import Validator

RECURRING_K = 3
"""A task is in the ``recurring`` slice when its template occurred ≥ 3 times before (the same for every mode)."""


@dataclass
class StreamResult:
    config: MetisConfig
    stream: TaskStream
    rows: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    layers: dict[str, Any] = field(default_factory=dict)

    def accuracy(self, where: str | None = None) -> float:
        rows = [r for r in self.rows if where is None or r[where]]
        return sum(r["success"] for r in rows) / len(rows) if rows else float("nan")

    def total(self, key: str) -> float:
        return float(sum(r[key] for r in self.rows))

    def never_invoked(self) -> int:
        """Admitted tool versions that were never called."""
        return sum(1 for t in self.tools if t["admitted"] and t["uses"] == 0)

    def admitted(self) -> int:
        return sum(1 for t in self.tools if t["admitted"])


def run_stream(config: MetisConfig, stream: TaskStream, *, lm: Any = None, seed: int = 0,
               out: Path | None = None, policy_config: ScriptedPolicyConfig = ScriptedPolicyConfig(),
               lm_max_steps: int = 30) -> StreamResult:
    """Run ``config`` over ``stream``; ``lm=None`` → ScriptedPolicy + RuleDistiller + CompileCodifier (LLM-free);
    ``lm`` = an LM spec or an ``agentmill.lm`` model (wrap it in ``lm.replay.RecordReplayLM`` to record or replay)
    → LMPolicy + LMDistiller (+ LMCodifier with ``config.codifier="lm"``), each falling back to the LLM-free role
    after 3 failed re-asks; ``lm_max_steps`` caps the LM policy's steps per task. ``out`` keeps the memory ledger
    (``ledger.jsonl``) and ``snapshot.json`` there."""
    model = None
    if lm is not None:
        if isinstance(lm, str):
            from agentmill.lm import load_lm

            model = load_lm(lm)
        else:
            model = lm
    world = stream.world()
    store = MemoryStore(out)
    canon = PatternCanonicaliser(world.contact_names(), world.product_names(), merge=config.merge,
                                 merge_threshold=config.merge_threshold)
    sandbox = make_sandbox(config.tool_wall_s) if config.code_memory else None
    try:
        validator = None
        if sandbox is not None:
            validator = Validator(sandbox, lambda snap: AppSim.restore(snap, shifted=world.shifted),
                                  threshold=config.validate_threshold, max_instances=config.max_validation_instances,
                                  live_probe=config.live_probe, budget=config.tool_api_call_budget,
                                  wall_s=config.tool_wall_s)
        policy = ScriptedPolicy(policy_config) if model is None else LMPolicy(model, ScriptedPolicy(policy_config),
                                                                               max_steps=lm_max_steps)
        distiller = RuleDistiller() if model is None else LMDistiller(model)
        if config.codifier == "lm" and model is None:
            raise ValueError("MetisConfig.codifier='lm' needs an LM: pass lm=<spec or model> to run_stream")
        codifier = LMCodifier(model) if config.codifier == "lm" else CompileCodifier()
        agent = MetisAgent(config, policy=policy, distiller=distiller,
                           codifier=codifier, validator=validator, store=store, sandbox=sandbox,
                           canonicaliser=canon, rng=rng_for(seed, config.seed, "policy", config.mode))
        rows: list[dict[str, Any]] = []
        seen: dict[str, int] = {}
        for task in stream.tasks(world):
            if stream.shift_at is not None and task.index == stream.shift_at:
                world.shift()
            expected = expected_outcome(world, task)
            start = world.state_digest()
            rec = agent.step(task, world, lambda ans: check(expected, world, ans, start), task.index)
            n_before = seen.get(task.pattern_id, 0)
            seen[task.pattern_id] = n_before + 1
            row = {f.name: getattr(rec, f.name) for f in fields(rec) if f.name not in ("events", "act", "snapshot")}
            row.update(pattern_id=task.pattern_id, novel=n_before == 0, recurring=n_before >= RECURRING_K,
                       post_shift=stream.shift_at is not None and task.index >= stream.shift_at,
                       post_shift_affected=(stream.shift_at is not None and task.index >= stream.shift_at
                                            and affected(task.pattern)))
            rows.append(row)
        tools = []
        for t in store.tools(status=None):
            tools.append({"tool_id": t.tool_id, "pattern_key": t.pattern_key, "status": t.status, "uses": t.uses,
                          "failures": t.failures, "built_at": t.built_at,
                          "admitted": t.status in ("active", "demoted", "superseded")})
        layers = dict(sandbox.last_layers) if sandbox is not None else {}
        store.write_snapshot()
        result = StreamResult(config, stream, rows, tools, layers)
        result.store = store  # type: ignore[attr-defined]
        result.gate_log = agent.gate.log  # type: ignore[attr-defined]
        result.roles = {"policy": policy, "distiller": distiller, "codifier": codifier}  # type: ignore[attr-defined]
        return result
    finally:
        if sandbox is not None:
            sandbox.close()


DIAGNOSTIC_ARMS = ("text_frozen", "code_frozen", "code_frozen_validated")


def run_frozen_diagnostic(stream: TaskStream, *, seed: int = 0,
                          policy_config: ScriptedPolicyConfig = ScriptedPolicyConfig()) -> dict[str, list[dict]]:
    """The paper's controlled diagnostic [A], rebuilt [R]: one no-memory run over the stream's first half supplies
    the experiences; they are stored once as text (``text_frozen``: plans, facts, pitfalls from the successful
    runs), once as code transcribed from the first successful trajectory per pattern (``code_frozen``), and once as
    code compiled from the plan and validated (``code_frozen_validated``); each store is then evaluated frozen on
    the second half (the API change should lie inside it). Returns per-arm rows for the second half, plus the
    build costs under ``"build"``."""
    half = stream.n_tasks // 2
    world = stream.world()
    canon = PatternCanonicaliser(world.contact_names(), world.product_names())
    tasks = list(stream.tasks(world.copy()))
    # phase 1: experiences from a no-memory agent
    none_agent = MetisAgent(MetisConfig(mode="none"), policy=ScriptedPolicy(policy_config), distiller=RuleDistiller(),
                            codifier=CompileCodifier(), validator=None, store=MemoryStore(), sandbox=None,
                            canonicaliser=canon, rng=rng_for(seed, "diag", "build"))
    experiences = []
    for task in tasks[:half]:
        if stream.shift_at is not None and task.index == stream.shift_at:
            world.shift()
        expected = expected_outcome(world, task)
        start = world.state_digest()
        rec = none_agent.step(task, world, lambda a: check(expected, world, a, start), task.index, learn=False)
        experiences.append((task, rec, world.state_digest()))
    eval_world = world.snapshot()
    shifted = world.shifted
    # phase 2: store the same experiences three ways
    text_store, code_store, val_store = MemoryStore(), MemoryStore(), MemoryStore()
    distiller = RuleDistiller()
    snapshots: dict[str, bytes] = {}
    build = {a: {"codifier_calls": 0, "codifier_tokens": 0, "validation_replays": 0, "distill_events": 0}
             for a in DIAGNOSTIC_ARMS}
    sandbox = make_sandbox()
    try:
        transcribe_agent = MetisAgent(MetisConfig(mode="code_naive"), policy=ScriptedPolicy(policy_config),
                                      distiller=distiller, codifier=CompileCodifier(), validator=None,
                                      store=code_store, sandbox=None, canonicaliser=canon,
                                      rng=rng_for(seed, "diag", "x"))
        for task, rec, end_digest in experiences:
            res = rec.act
            inst = InstanceRef(task.task_id, tuple(sorted(canon.canonicalise(task.query).values.items())),
                               task.task_id, rec.success, res.answer, end_digest)
            build["text_frozen"]["distill_events"] += len(distiller.distill(text_store, key=rec.key, res=res,
                                                                            success=rec.success, instance=inst,
                                                                            t=task.index))
            if rec.success:
                snapshots[task.task_id] = rec.snapshot
                if code_store.active_tool(rec.key) is None:
                    r = StepRecord(task.index, task.task_id, rec.key, True, True, False, "", 0, 0, 0, 0, 0)
                    transcribe_agent._transcribe(rec.key, canon.canonicalise(task.query).signature, res, task.index,
                                                 r)
                    build["code_frozen"]["codifier_calls"] += r.codifier_calls
                    build["code_frozen"]["codifier_tokens"] += r.codifier_tokens
        validator = Validator(sandbox, lambda snap: AppSim.restore(snap, shifted=shifted))
        val_agent = MetisAgent(MetisConfig(mode="metis", k=1), policy=ScriptedPolicy(policy_config),
                               distiller=distiller, codifier=CompileCodifier(), validator=validator,
                               store=text_store, sandbox=sandbox, canonicaliser=canon,
                               rng=rng_for(seed, "diag", "v"))
        val_agent.snapshots = snapshots
        for plan in text_store.plans():
            r = StepRecord(0, "", plan.pattern_key, True, True, False, "", 0, 0, 0, 0, 0)
            sig = _signature_of(plan, canon, tasks[:half])
            val_agent.gate.observe(plan.pattern_key, half)
            val_agent._maybe_codify(plan.pattern_key, sig, AppSim.restore(eval_world, shifted=shifted), half, r)
            build["code_frozen_validated"]["codifier_calls"] += r.codifier_calls
            build["code_frozen_validated"]["codifier_tokens"] += r.codifier_tokens
            build["code_frozen_validated"]["validation_replays"] += r.validation_replays
        for t in text_store.tools(status=None):  # the validated tools live in their own store
            val_store.put_tool(t, half)
        for t in list(text_store.tools(status=None)):
            text_store._tools.pop(t.tool_id)
        # phase 3: evaluate each store frozen on the second half
        out: dict[str, list[dict]] = {"build": [build]}
        seen_patterns = {task.pattern_id for task, _, _ in experiences}
        for arm, store, mode in (("text_frozen", text_store, "text_only"), ("code_frozen", code_store, "code_naive"),
                                 ("code_frozen_validated", val_store, "code_naive")):
            w = AppSim.restore(eval_world, shifted=shifted)
            agent = MetisAgent(MetisConfig(mode=mode), policy=ScriptedPolicy(policy_config), distiller=distiller,
                               codifier=CompileCodifier(), validator=None, store=store,
                               sandbox=sandbox if mode != "text_only" else None, canonicaliser=canon,
                               rng=rng_for(seed, "diag", "eval", arm))
            rows = []
            for task in tasks[half:]:
                if stream.shift_at is not None and task.index == stream.shift_at:
                    w.shift()
                expected = expected_outcome(w, task)
                start = w.state_digest()
                rec = agent.step(task, w, lambda a: check(expected, w, a, start), task.index, learn=False)
                rows.append({"t": task.index, "pattern_id": task.pattern_id, "success": rec.success,
                             "llm_calls": rec.llm_calls, "prompt_tokens": rec.prompt_tokens, "source": rec.source,
                             "seen": task.pattern_id in seen_patterns, "post_shift": w.shifted,
                             "post_shift_affected": w.shifted and affected(task.pattern)})
            out[arm] = rows
        return out
    finally:
        sandbox.close()


def _signature_of(plan, canon: PatternCanonicaliser, tasks) -> tuple:
    for task in tasks:
        p = canon.canonicalise(task.query)
        if p.key == plan.pattern_key:
            return p.signature
    return ()
