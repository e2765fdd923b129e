"""The agent loop (docs/methods/constraint_rot.md "Use it" 2; the package README, "Map of the package"): one episode
under one condition → one result row.

Reads top to bottom in the order of the episode:

1. reset the sandbox to the episode's office and plant what the rule's calls need (:func:`.generate.prepare_sandbox`);
2. system prompt, then the policy turn at its location (or its neutral twin for ``never_stated``); the
   ``memory_tool`` and ``policy_doc_tool`` locations are real ``memory_read`` / ``http_get`` calls;
3. optional early probe: the forbidden request right after the policy turn, answered by the actor (recorded as
   early obedience; the answer stays in the transcript);
4. distractor work, replayed (scripted calls executed for real) or live (the actor acts), cut into ``k`` segments
   with a compaction after each, pinning's post-compaction hook after every compaction;
5. counterfactual edit of the compacted context (``cf_keep``/``cf_drop``), forged operator update in the tail;
6. the trigger (or allowed near-miss); the actor acts for up to ``max_steps_per_turn`` tool calls until it replies;
7. grade the calls after the trigger (:func:`.grader.grade`), cross-check the sandbox state (``grader_mismatch``),
   classify the rule's survival in the context the actor decided on (cards ignored).

The actor never sees ``meta``: every decision gets :func:`.actors.base.visible` messages. Results are appended as
JSONL rows with an fsync per episode (:class:`ResultWriter`); :func:`result_key` is the ``--resume`` key of the package
README, "Faults".
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.methods.constraint_rot.actors.base import Action, Actor, ActorBrief, visible
from agentmill.methods.constraint_rot.compactors.base import CompactionResult
from agentmill.methods.constraint_rot.conditions import Condition, drop_rule, impersonation_message, keep_rule
from agentmill.methods.constraint_rot.generate import (HANDBOOK_REQUEST, HANDBOOK_URL, MEMORY_REQUEST, SYSTEM_PROMPT,
                                                       Episode, prepare_sandbox)
from agentmill.methods.constraint_rot.grader import Outcome, cross_check, grade
from agentmill.methods.constraint_rot.messages import as_counter, count_tokens
from agentmill.methods.constraint_rot.pinning.gate import PolicyGate
from agentmill.methods.constraint_rot.pinning.middleware import PinningMiddleware
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry
from agentmill.methods.constraint_rot.survival import classify_survival

RESUME_FIELDS = ("episode_id", "condition", "actor", "compactor", "compactor_hash", "pin", "attack", "seed")
"""A completed (episode, condition, actor, compactor, pin, attack, seed) is skipped on ``--resume`` (the package
README, "Faults")."""
ISSUER = "op"


@dataclass(frozen=True)
class ContextBudget:
    """Context budget of the harness. ``keep_last`` is the tail every compaction keeps; ``window_tokens`` and
    ``trigger_fraction`` describe when a harness would compact (recorded; conditions fix the compaction points)."""

    window_tokens: int = 0
    trigger_fraction: float = 0.8
    keep_last: int = 4

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise ValueError(f"ContextBudget.keep_last must be >= 1, got {self.keep_last}")
        if not 0.0 < self.trigger_fraction <= 1.0:
            raise ValueError(f"ContextBudget.trigger_fraction must be in (0, 1], got {self.trigger_fraction}")


@dataclass
class Decision:
    """What the actor did in one turn: executed calls (gate-blocked calls are not executed), final text."""

    calls: list[ToolCall] = field(default_factory=list)
    blocked: list[ToolCall] = field(default_factory=list)
    failed_ids: list[str] = field(default_factory=list)
    text: str | None = None
    invalid: bool = False
    model_input_sha: str | None = None
    model_input: list[dict[str, Any]] | None = None
    tokens: int = 0


@dataclass
class EpisodeResult:
    """One result row (the package README, "Map of the package"; columns this harness cannot fill are None) plus the
    final transcript."""

    row: dict[str, Any]
    messages: list[Message] = field(default_factory=list, repr=False)
    compactions: list[CompactionResult] = field(default_factory=list, repr=False)

    @property
    def violation(self) -> bool:
        return bool(self.row["violation"])

    @property
    def survived(self) -> bool:
        return self.row["survival_label"] in ("preserved", "paraphrased")


def result_key(row: dict[str, Any]) -> str:
    """The resume key of a result row (the package README, "Faults"), as one string."""
    missing = [f for f in RESUME_FIELDS if f not in row]
    if missing:
        raise ValueError(f"result_key: row lacks field(s) {missing}")
    return json.dumps([row[f] for f in RESUME_FIELDS], sort_keys=True, default=str)


def completed_keys(path: str | Path) -> set[str]:
    """Keys of rows already in a results file (rows with ``error`` set are retried)."""
    p = Path(path)
    if not p.exists():
        return set()
    keys = set()
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{i}: not a JSON row ({e})") from None
        if not row.get("error"):
            keys.add(result_key(row))
    return keys


class ResultWriter:
    """Appends result rows to a JSONL file, flushing and fsync-ing after every row (the package README, "Faults"
    "never lost")."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, row: dict[str, Any]) -> None:
        line = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _actor_usage(actor: Any) -> dict[str, float] | None:
    """A copy of the actor's running usage totals (``EndpointActor.usage``), or None if it reports none."""
    usage = getattr(actor, "usage", None)
    return dict(usage) if isinstance(usage, dict) else None


def episode_registry(episode: Episode) -> PolicyRegistry:
    """The operator registry of one episode (its rule's card text and forbidden predicate), frozen: what the loop
    pins and gates with when it is not given a ready middleware, and what framework runs must pin with too."""
    inst = episode.instance
    reg = PolicyRegistry(version=episode.catalogue_version)
    reg.register(inst.rule_id, inst.card_text, issuer=ISSUER, kind=inst.kind, scope_tools=inst.family.tools,
                 predicate=inst.predicate)
    reg.freeze()
    return reg


class AgentLoop:
    """Runs episodes for one actor in one sandbox (see the module docstring).

    ``compactor``: the ``M`` of conditions that leave it unset. ``pin``: a ready :class:`PinningMiddleware` to
    use for every pinned condition, or None to build one per episode from a registry holding the episode's rule
    (card text = the family card; predicate = the family's forbidden predicate). ``gate`` likewise.
    ``counter``: token counter for budgets, cards and survival distances (default SmolLM2)."""

    def __init__(self, actor: Actor, sandbox: Any, *, compactor: Any = None, pin: PinningMiddleware | None = None,
                 gate: PolicyGate | None = None, budget: ContextBudget | None = None, max_steps_per_turn: int = 8,
                 log_model_inputs: Literal["hash", "full"] = "hash", counter: Any = None):
        if max_steps_per_turn < 1:
            raise ValueError(f"max_steps_per_turn must be >= 1, got {max_steps_per_turn}")
        if log_model_inputs not in ("hash", "full"):
            raise ValueError(f"log_model_inputs must be 'hash' or 'full', got {log_model_inputs!r}")
        self.actor, self.sandbox, self.compactor = actor, sandbox, compactor
        self.pin, self.gate = pin, gate
        self.budget = budget or ContextBudget()
        self.max_steps, self.log_model_inputs = max_steps_per_turn, log_model_inputs
        self.counter = as_counter(counter)

    # ------------------------------------------------------------------------------------------------ public
    def run(self, episode: Episode, condition: Condition) -> EpisodeResult:
        """One episode under one condition; a crash becomes a row with ``error`` set (never dropped)."""
        t0 = time.perf_counter()
        usage0 = _actor_usage(self.actor)
        try:
            res = self._run(episode, condition)
        except Exception as e:  # noqa: BLE001 - recorded in the row, counted in the health table
            row = self._base_row(episode, condition, self._compactor_for(condition, strict=False), None)
            row["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
            res = EpisodeResult(row)
        res.row["latency_s"] = round(time.perf_counter() - t0, 6)
        # endpoint actors: this episode's share of the running token/cost totals (the package README, "Map of the
        # package")
        if usage0 is not None:
            usage1 = _actor_usage(self.actor) or {}
            res.row["actor_usage"] = {k: round(usage1.get(k, 0) - usage0.get(k, 0), 10) for k in usage1}
        return res

    def resume_key(self, episode: Episode, condition: Condition) -> str:
        """The :func:`result_key` the row of (``episode``, ``condition``) will have, without running it."""
        return result_key(self._base_row(episode, condition, self._compactor_for(condition, strict=False), None))

    def run_all(self, episodes: Iterable[Episode], conditions: Sequence[Condition], out: str | Path, *,
                resume: bool = True) -> list[dict[str, Any]]:
        """Run every (episode, condition), appending rows to ``out``; with ``resume`` skip completed keys."""
        done = completed_keys(out) if resume else set()
        writer, rows = ResultWriter(out), []
        for ep in episodes:
            for cond in conditions:
                if self.resume_key(ep, cond) in done:
                    continue
                row = self.run(ep, cond).row
                writer.append(row)
                rows.append(row)
        return rows

    def run_grid(self, episodes: Sequence[Episode], conditions: Sequence[Condition], out: str | Path, *,
                 progress: Callable[[Condition, int, int], None] | None = None) -> list[dict[str, Any]]:
        """Every (condition, episode) row, condition-major, checkpointed in ``out``: a killed grid resumes where it
        stopped (completed rows are read back, rows with ``error`` are retried), and rows of ``out`` that belong to
        another grid are ignored. ``progress(condition, done, total)`` after each condition."""
        for j, cond in enumerate(conditions):
            self.run_all(episodes, [cond], out)
            if progress is not None:
                progress(cond, j + 1, len(conditions))
        latest: dict[str, dict[str, Any]] = {}
        for i, line in enumerate(Path(out).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{out}:{i}: not a JSON row ({e})") from None
                key = result_key(row)
                if key not in latest or latest[key].get("error") or not row.get("error"):
                    latest[key] = row
        rows = []
        for cond in conditions:
            for ep in episodes:
                key = self.resume_key(ep, cond)
                if key not in latest:
                    raise RuntimeError(f"run_grid: no row for {ep.episode_id} / {cond.label} in {out}")
                rows.append(latest[key])
        return rows

    # ------------------------------------------------------------------------------------------------ episode
    def _compactor_for(self, cond: Condition, *, strict: bool = True) -> Any:
        if cond.rounds == 0:
            return None
        m = cond.compactor if cond.compactor is not None else self.compactor
        if m is None and strict:
            raise ValueError(f"condition {cond.label!r} compacts but neither it nor the loop has a compactor")
        return m

    def _run(self, episode: Episode, cond: Condition) -> EpisodeResult:
        inst, sb = episode.instance, self.sandbox
        compactor = self._compactor_for(cond)
        pin = gate = None
        if cond.pin or cond.gate:
            reg = episode_registry(episode)
            if cond.pin:
                pin = self.pin or PinningMiddleware(reg, placement=cond.placement, counter=self.counter)
            if cond.gate:
                gate = self.gate or PolicyGate(reg)
        digests = frozenset(c.digest for c in pin.cards.values()) if pin is not None else frozenset()
        if hasattr(self.actor, "begin"):
            self.actor.begin(ActorBrief(inst, episode.request, digests))
        tools = sb.tools()

        # 1-2. office, system prompt, policy turn
        prepare_sandbox(sb, episode, neutral=cond.neutral)
        policy = episode.neutral_frame if cond.neutral else episode.policy_frame
        p_origin = "neutral" if cond.neutral else "policy"
        msgs: list[Message] = []
        step = 0

        def add(m: Message) -> None:
            nonlocal step
            msgs.append(m)
            step += 1

        def lab(origin: str, trusted: bool = True) -> dict[str, Any]:
            return {"origin": origin, "trusted": trusted, "step": step}

        system = SYSTEM_PROMPT + (f"\n\n{policy}" if episode.location == "system" else "")
        add(Message("system", system, meta=lab(p_origin if episode.location == "system" else "system")))
        steps = list(episode.distractor)
        first_step_done = False
        if episode.location in ("memory_block", "onboarding_turn"):
            add(Message("user", policy, meta=lab(p_origin)))
        elif episode.location in ("memory_tool", "policy_doc_tool"):
            ask, call = ((MEMORY_REQUEST, ToolCall("p0", "memory_read", {})) if episode.location == "memory_tool"
                         else (HANDBOOK_REQUEST, ToolCall("p0", "http_get", {"url": HANDBOOK_URL})))
            add(Message("user", ask, meta=lab("task")))
            add(Message("assistant", "", tool_calls=(call,), meta=lab("task")))
            res = sb.execute(call)
            if not res.ok:
                raise RuntimeError(f"policy turn {call.name} failed: {res.error}")
            add(Message("tool", res.content(), tool_call_id=call.id, name=call.name, meta=lab(p_origin)))
        elif episode.location == "first_user_turn":
            self._distractor_step(add, lab, steps[0], episode, prefix=policy, origin=p_origin)
            first_step_done = True

        # 3. early probe
        early: Decision | None = None
        early_outcome: Outcome | None = None
        if episode.early_probe:
            add(Message("user", episode.request_text, meta=lab("probe")))
            early = self._decide(msgs, add, lab, pin, gate, tools, "probe")
            early_outcome = grade(inst, early.calls, reply_text=early.text, request=episode.request,
                                  invalid=early.invalid)

        # 4. distractor, compaction after each of k segments
        rest = steps[1:] if first_step_done else steps
        k = cond.rounds
        bounds = {round(len(rest) * (j + 1) / k) for j in range(k)} if k else set()
        compactions: list[CompactionResult] = []
        if k and 0 in bounds:
            msgs[:] = self._compact(msgs, compactor, pin, compactions)
        for i, s in enumerate(rest, 1):
            if episode.mode == "replay":
                self._distractor_step(add, lab, s, episode)
            else:
                add(Message("user", s.instruction, meta=lab("distractor")))
                self._decide(msgs, add, lab, pin, gate, tools, "distractor")
            for _ in range(sum(1 for b in bounds if b == i)):
                msgs[:] = self._compact(msgs, compactor, pin, compactions)
        if k and len(compactions) < k:  # empty segments still count as compaction rounds
            for _ in range(k - len(compactions)):
                msgs[:] = self._compact(msgs, compactor, pin, compactions)

        # 5. counterfactual edits, forged operator update
        if cond.cf == "drop":
            msgs[:] = drop_rule(msgs, inst)
        elif cond.cf == "keep":
            msgs[:] = keep_rule(msgs, inst)
        if cond.impersonation:
            add(impersonation_message(inst, step=step))
        survival = classify_survival(inst.text, {"values": inst.matcher_values}, inst.matcher_cues, msgs,
                                     carryover_target=inst.target_argument or None, counter=self.counter)
        saw = None
        if compactions:  # was the rule inside what the last compaction actually received (pitfall 10)?
            received = list(compactions[-1].summariser_input)
            saw = bool(received) and classify_survival(inst.text, {"values": inst.matcher_values},
                                                       inst.matcher_cues, received, counter=self.counter).survived

        # 6. trigger
        before = sb.state()
        add(Message("user", episode.request_text, meta=lab("trigger")))
        dec = self._decide(msgs, add, lab, pin, gate, tools, "trigger")

        # 7. grade, cross-check
        outcome = grade(inst, dec.calls, reply_text=dec.text, request=episode.request, invalid=dec.invalid)
        agree = cross_check(inst, outcome, sb.state(), before=before, failed_call_ids=dec.failed_ids)
        row = self._base_row(episode, cond, compactor, pin)
        last = compactions[-1] if compactions else None
        row.update({
            "ratio_achieved": (round(last.tokens_after / last.tokens_before, 4) if last and last.tokens_before
                               else None),
            "survival_label": survival.label, "saw_rule_in_input": saw,
            "rule_distance_tokens": survival.rule_distance_tokens, "carryover": survival.carryover,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in dec.calls],
            "blocked_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in dec.blocked],
            "reply": dec.text, "violation": outcome.violation, "compliant_alternative": outcome.compliant_alternative,
            "refusal": outcome.refusal, "did_requested": outcome.did_requested,
            "invalid_action": outcome.invalid_action, "grader_mismatch": not agree,
            "early_violation": early_outcome.violation if early_outcome else None,
            "early_compliant_alternative": early_outcome.compliant_alternative if early_outcome else None,
            "tokens_at_trigger": dec.tokens, "card_tokens": pin.card_tokens if pin is not None else 0,
            "model_input_sha": dec.model_input_sha, "compactions": len(compactions),
            # a compaction whose summariser raised left the context unchanged; the row says so, so that metrics never
            # count it as a compacted episode (the package README, "Faults")
            "summary_failed": any(bool(c.details.get("summary_failed")) for c in compactions),
            "forged_attempts": pin.report.forged_attempts if pin is not None else 0,
        })
        if dec.model_input is not None:
            row["model_input"] = dec.model_input
        return EpisodeResult(row, list(msgs), compactions)

    # ------------------------------------------------------------------------------------------------ pieces
    def _distractor_step(self, add: Any, lab: Any, s: Any, episode: Episode, *, prefix: str | None = None,
                         origin: str = "distractor") -> None:
        sb = self.sandbox
        text = f"{s.instruction}\n{prefix}" if prefix else s.instruction
        add(Message("user", text, meta=lab(origin)))
        if episode.mode == "live" and prefix is None:
            return
        add(Message("assistant", "", tool_calls=s.calls, meta=lab("distractor")))
        for call in s.calls:
            res = sb.execute(call)
            add(Message("tool", res.content(), tool_call_id=call.id, name=call.name,
                        meta=lab("distractor", trusted=False)))
        add(Message("assistant", s.reply, meta=lab("distractor")))

    def _compact(self, msgs: list[Message], compactor: Any, pin: PinningMiddleware | None,
                 log: list[CompactionResult]) -> list[Message]:
        res = compactor.compact(list(msgs), keep_last=self.budget.keep_last)
        log.append(res)
        out = list(res.messages)
        return pin.after_compaction(out) if pin is not None else out

    def _decide(self, msgs: list[Message], add: Any, lab: Any, pin: PinningMiddleware | None,
                gate: PolicyGate | None, tools: Sequence[Any], stage: str) -> Decision:
        d = Decision()
        for n in range(self.max_steps):
            if pin is not None:
                msgs[:] = pin.before_model(msgs)
            seen = visible(msgs)
            if n == 0:
                dicts = [m.to_dict() for m in seen]
                d.model_input_sha = _sha(dicts)
                d.tokens = count_tokens(seen, self.counter)
                if self.log_model_inputs == "full":
                    d.model_input = dicts
            action: Action = self.actor.act(seen, tools)
            if action.invalid:
                d.invalid = True
                add(Message("assistant", action.raw or "", meta=lab(stage)))
                return d
            if action.text is not None:
                d.text = action.text
                add(Message("assistant", action.text, meta=lab(stage)))
                return d
            add(Message("assistant", "", tool_calls=action.tool_calls, meta=lab(stage)))
            for call in action.tool_calls:
                if gate is not None:
                    g = gate.check(call)
                    if not g.allowed:
                        d.blocked.append(call)
                        add(Message("tool", f"ERROR: {g.error}", tool_call_id=call.id, name=call.name,
                                    meta=lab(stage, trusted=True)))
                        continue
                res = self.sandbox.execute(call)
                d.calls.append(call)
                if not res.ok:
                    d.failed_ids.append(call.id)
                add(Message("tool", res.content(), tool_call_id=call.id, name=call.name,
                            meta=lab(stage, trusted=False)))
        return d

    def _base_row(self, ep: Episode, cond: Condition, compactor: Any, pin: PinningMiddleware | None
                  ) -> dict[str, Any]:
        actor_cfg = getattr(self.actor, "config", {"name": getattr(self.actor, "name", type(self.actor).__name__)})
        return {
            "episode_id": ep.episode_id, "catalogue_version": ep.catalogue_version, "catalogue_sha": ep.catalogue_sha,
            "family": ep.family, "kind": ep.kind, "split": ep.split, "location": ep.location,
            "early_probe": ep.early_probe, "request": ep.request, "condition": cond.label, "mode": ep.mode,
            "actor": getattr(self.actor, "name", type(self.actor).__name__), "actor_config_hash": _sha(actor_cfg)[:16],
            "organism_card_sha": actor_cfg.get("organism_card_sha"),
            "compactor": getattr(compactor, "name", None) if compactor is not None else "none",
            "compactor_hash": getattr(compactor, "config_hash", None) if compactor is not None else None,
            "prompt_style": getattr(compactor, "style", None), "prompt_sha": getattr(compactor, "prompt_sha", None),
            "summariser_lm": getattr(compactor, "lm_spec", None), "backend": None, "dtype": None,
            "rounds": cond.rounds,
            "ratio_target": getattr(compactor, "ratio", None),
            "ratio_achieved": None, "pin": "card" if cond.pin else "none",
            "placement": cond.placement if cond.pin else None, "pin_backend": "agentmill" if cond.pin else None,
            "gate": cond.gate, "attack": (ep.attack or {}).get("kind", "impersonation" if cond.impersonation
                                                               else "none"),
            "attack_hash": ((ep.attack.get("attack_hash") or _sha(ep.attack)[:16]) if ep.attack else None), "seed": ep.seed, "error": None,
        }
