"""LLM-driven roles over :mod:`agentmill.lm` ([R]; roles as the repository's [C]).

Every LM call is recorded before its reply is used, twice over: as an ``lm_call`` event in the run's ledger
(keyed ``<step>/lmNN`` under the loop step that made it: model, prompt and its sha256, reply and its sha256, sampling
parameters, token counts; latency and endpoint in the event's unhashed ``meta``), and in ``run_dir/lm_calls.jsonl``
keyed by request hash (RecordReplay: a fresh run over the same calls never asks the model). A resumed run takes
each call's reply from the ledger (checking that the request is the one recorded, so a diverged replay fails
loudly), so no call made before a kill is made again. Schema violations are retried (≤ 3, the error fed back); a
role that still fails falls back to its programmatic twin for that step (``fallback`` recorded).

The advocate writes its metric as code (``metric(data) -> float``, JSON field or a fenced block labelled
``metric``), AST-checked and run only in the sandbox (never in-process); code that fails the check or fails on
simulated data of the advocate's own theory is replaced by a metric template (the one named in the reply, else the
one with the smallest gate p on the proposed design), with ``fallback: true`` in the proposal's ``metric_code``
record. The reviser runs the repository's inner critique loop [C `src/improver.py`] with a critic (:class:`LLMCritic`,
temperature 0, falling back to :class:`~agentmill.methods.autocog.agents.search.LossCritic`)."""

from __future__ import annotations

import hashlib
import time
from functools import cache
from pathlib import Path

from agentmill.lm.replay import CallLog, model_key, request_sha256
from agentmill.methods.autocog.agents.base import Critique, Proposal, Revision, Verdict
from agentmill.methods.autocog.agents.prompts import (advocate_prompt, arbiter_prompt, critic_prompt, fenced_code,
                                                      first_json, reviser_prompt)
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.metrics import TEMPLATE_NAMES, CodeMetric, templates_for
from agentmill.methods.autocog.sandbox import SandboxError, check_source, run_batch
from agentmill.methods.autocog.theory import CodeTheory, ParamSpace

MAX_PARSE_RETRIES = 3
"""Per call: a reply that fails its schema is re-asked with the error appended, at most this many asks [R]."""
MAX_CRITIQUE_ITERS = 10
"""Reviser inner-loop iterations [C `src/run_config.py` MAX_CRITIQUE_ITERS]."""
MAX_COMPILE_RETRIES = 10
"""Asks per reviser iteration until a candidate compiles and passes the sandbox check [C IMPROVER_MAX_ATTEMPTS]."""
METRIC_CHECK_SUBJECTS = 10
"""Simulated subjects of the advocate's own theory on which its metric code must run before it is used [R]."""


class ReplayDivergence(RuntimeError):
    """A resumed run asked a different request than the ledger recorded at that position (not a parse error: the
    roles' retry loop must not swallow it)."""


def model_id(lm) -> str:
    """The model's spec without an endpoint address (``openai:m@http://127.0.0.1:PORT/v1`` -> ``openai:m``): the
    address is transport, differs between a run and its resume, and so stays out of the hashed ledger payload."""
    return model_key(str(getattr(lm, "spec", "?")))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class LMCaller:
    """Record-before-use LM calls: replay from the ledger on resume, from ``lm_calls.jsonl`` by request hash on a
    RecordReplay rerun, else ask the model.

    ``lm_calls.jsonl`` is an :class:`~agentmill.lm.replay.CallLog` with AutoCog's own record schema and request
    key (the sha256 of ``[prompt, temperature, max_new_tokens, seed]``, model left out), so existing run
    directories replay unchanged; damaged lines are skipped, and their calls asked again, as they always were."""

    def __init__(self, lm, run_dir: Path, *, role: str, temperature: float, max_new_tokens: int = 1024) -> None:
        self.lm, self.path, self.role = lm, Path(run_dir) / "lm_calls.jsonl", role
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.cache: dict[str, dict] = {}
        self.prompts: list[str] = []
        self.model_calls = 0
        """Calls that reached the model in this process (neither ledger nor RecordReplay had them)."""
        self.ledger = None
        self.log = CallLog(self.path, skip_bad_lines=True)
        self.cache.update((key, recs[-1]) for key, recs in self.log.load().items())

    def bind(self, ledger) -> None:
        """Record calls as ``lm_call`` events in ``ledger`` (under its current ``scope``)."""
        self.ledger = ledger

    def _ask_model(self, prompt: str, key: str, seed: int) -> dict:
        from agentmill.lm import GenerateConfig

        cfg = GenerateConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=seed)
        t0 = time.monotonic()
        comp = self.lm.generate([prompt], cfg)[0]
        self.model_calls += 1
        rec = {"request_sha256": key, "model": model_id(self.lm), "temperature": self.temperature,
               "max_new_tokens": self.max_new_tokens, "seed": seed, "prompt_sha256": _sha(prompt),
               "response": comp.text, "response_sha256": _sha(comp.text), "finish_reason": comp.finish_reason,
               "prompt_tokens": int(comp.prompt_tokens or 0),
               "completion_tokens": len(comp.token_ids) or len(comp.logprobs),
               "latency_s": round(time.monotonic() - t0, 4)}
        self.log.append(rec)
        self.cache[key] = rec
        return rec

    def __call__(self, prompt: str, *, seed: int) -> str:
        key = request_sha256([prompt, self.temperature, self.max_new_tokens, seed])
        self.prompts.append(prompt)
        scope = None if self.ledger is None else self.ledger.scope
        step = None
        if scope is not None:
            step = f"{scope['step']}/lm{scope['n']:02d}"
            scope["n"] += 1
            if self.ledger.has(step):
                got = self.ledger.get(step)
                if got["request_sha256"] != key:
                    raise ReplayDivergence(f"resume diverged at ledger step {step!r}: recorded request "
                                     f"{got['request_sha256'][:12]}, now asking {key[:12]}")
                return got["response"]
        source = "record_replay" if key in self.cache else "model"
        rec = self.cache[key] if source == "record_replay" else self._ask_model(prompt, key, seed)
        if step is not None:
            payload = {k: rec[k] for k in ("request_sha256", "model", "temperature", "max_new_tokens", "seed",
                                           "prompt_sha256", "response", "response_sha256", "finish_reason",
                                           "prompt_tokens", "completion_tokens")}
            payload.update(role=self.role, prompt=prompt)
            meta = {"source": source, "latency_s": rec["latency_s"] if source == "model" else 0.0,
                    "endpoint": str(getattr(self.lm, "spec", "?"))}
            self.ledger.append("lm_call", step, payload, round=scope["round"], slot=scope["slot"], meta=meta)
        return rec["response"]


class _LLMRole:
    """What the loop needs from an LLM role: the ledger to record into, and that the step it drives uses an LM."""

    caller: LMCaller
    uses_lm = True

    def bind_ledger(self, ledger) -> None:
        self.caller.bind(ledger)


def _ask(caller: LMCaller, build, parse, seed: int, *, attempts: int = MAX_PARSE_RETRIES):
    """Ask, parse ``parse(json_object, raw_text)``; on failure re-ask with the error appended (``attempts`` asks in
    all). Returns (value, errors) or (None, errors)."""
    errors: list[str] = []
    for attempt in range(attempts):
        prompt = build() + ("" if not errors else f"\n\nYour previous reply was invalid: {errors[-1]}. Try again.")
        text = caller(prompt, seed=seed * 10 + attempt)
        try:
            return parse(first_json(text), text), errors
        except (ValueError, KeyError, TypeError, SandboxError) as e:
            errors.append(str(e)[:300])
    return None, errors


def _check_metric_code(source: str, own, design: Design, seed: int) -> str | None:
    """None if ``source`` passes the AST policy and gives a finite pooled value and a per-subject value for every
    subject on ``METRIC_CHECK_SUBJECTS`` simulated subjects of ``own`` (all in the sandbox); else the reason."""
    from agentmill.methods.autocog.simulate import simulate

    try:
        check_source(source, entry="metric")
    except SandboxError as e:
        return f"{type(e).__name__}: {e}"
    try:
        data = simulate(own, design, METRIC_CHECK_SUBJECTS, (seed, "metric_check"))
    except Exception as e:  # noqa: BLE001 - the own theory itself fails on this design (e.g. LLM code)
        return f"own theory failed to simulate: {type(e).__name__}: {e}"[:300]
    est, errors = CodeMetric(source).evaluate(data)
    if est.value is None or est.variance is None:
        return "; ".join(errors)[:300] or "metric gave no value"
    return None


class LLMAdvocate(_LLMRole):
    def __init__(self, lm, *, fallback, run_dir: Path, name: str = "advocate", temperature: float = 0.7) -> None:
        self.caller = LMCaller(lm, run_dir, role=name, temperature=temperature)
        self.fallback, self.name = fallback, name

    def propose(self, own, opponent, pool, rng) -> Proposal:
        seed = int(rng.integers(2**31))

        def parse(obj: dict, text: str) -> Proposal:
            d = obj["design"]
            design = Design.make(d["validities"], d["pairs_a"], d["pairs_b"], d.get("rating_max", 1),
                                 rationale=str(d.get("rationale", ""))[:500])
            bad = [p for p in zip(design.pairs_a, design.pairs_b)
                   if p in pool.exclude_pairs or p[::-1] in pool.exclude_pairs]
            if bad:
                raise ValueError("design uses held-out battery pairs")
            m = obj.get("metric") or {}
            if not isinstance(m, dict):
                raise ValueError("metric must be an object with 'source' and/or 'name'")
            source = m.get("source") or fenced_code(text, "metric")
            name = m.get("name")
            tmpl = templates_for(own, opponent, cardinal=design.rating_max > 1)
            if source is None or name is not None:
                if name not in TEMPLATE_NAMES:
                    raise ValueError(f"metric name must be one of {TEMPLATE_NAMES} (or give metric.source)")
                if not [t for t in tmpl if t.name == name]:
                    raise ValueError(f"metric {name} is not applicable to these theories/design")
            met = next((t for t in tmpl if t.name == name), None)
            prop = Proposal(design, met, rationale=design.rationale)
            if source is not None:
                prop.extra["metric_source"] = str(source)
            return prop

        prop, errors = _ask(self.caller, lambda: advocate_prompt(own, opponent, pool, []), parse, seed)
        if prop is None:
            prop = self.fallback.propose(own, opponent, pool, rng)
            prop.extra["fallback"] = True
        elif "metric_source" in prop.extra:
            self._use_metric_code(prop, own, opponent, seed)
        prop.extra["llm_errors"] = errors
        return prop

    def _use_metric_code(self, prop: Proposal, own, opponent, seed: int) -> None:
        """Sandbox-check the reply's metric code; use it, or fall back to a template (``fallback: true`` logged)."""
        source = prop.extra.pop("metric_source")
        rec = {"sha256": _sha(source), "fallback": False}
        err = _check_metric_code(source, own, prop.design, seed)
        if err is None:
            prop.metric = CodeMetric(source, rationale=prop.rationale)
        else:
            rec.update(fallback=True, error=err)
            if prop.metric is None:
                prop.metric = self._min_p_template(own, opponent, prop.design, seed)
            rec["template"] = prop.metric.name
        prop.extra["metric_code"] = rec

    def _min_p_template(self, own, opponent, design: Design, seed: int):
        """The metric template with the smallest Welch p on ``design`` (ties -> template order), as SearchAdvocate
        picks, restricted to the advocate's own design."""
        from agentmill.methods.autocog.gate import welch_gate
        from agentmill.methods.autocog.metrics import predicted_estimate

        n, n_real = getattr(self.fallback, "n_sim", 50), getattr(self.fallback, "n_real", 25)
        best = None
        for j, m in enumerate(templates_for(own, opponent, cardinal=design.rating_max > 1)):
            g = welch_gate(predicted_estimate(own, design, m, n, (seed, "fallback_metric")),
                           predicted_estimate(opponent, design, m, n, (seed, "fallback_metric")), n_real=n_real)
            if best is None or (g.p, j) < best[0]:
                best = ((g.p, j), m)
        return best[1]


class LLMArbiter(_LLMRole):
    def __init__(self, lm, *, fallback, run_dir: Path, temperature: float = 0.2) -> None:
        self.caller, self.fallback = LMCaller(lm, run_dir, role="arbiter", temperature=temperature), fallback

    def judge(self, slot1, slot2, pool) -> Verdict:
        def parse(obj: dict, text: str) -> Verdict:
            if obj["verdict"] not in ("new_model", "new_theory") or obj["target_theory_idx"] not in (1, 2):
                raise ValueError("verdict must be new_model|new_theory and target_theory_idx 1|2")
            return Verdict(obj["verdict"], int(obj["target_theory_idx"]), str(obj.get("interpretation", ""))[:1000],
                           str(obj.get("recommendation", ""))[:1000])

        v, errors = _ask(self.caller, lambda: arbiter_prompt(slot1, slot2, pool), parse, len(pool.observations))
        if v is None:
            v = self.fallback.judge(slot1, slot2, pool)
            v.recommendation = f"[fallback after {len(errors)} invalid replies] " + v.recommendation
        return v


@cache
def critic_reply_model():
    """The critic's strict JSON schema [R] as a pydantic model: exactly ``verdict`` and ``critique``.
    pydantic is imported here, not at module import: it is not a core dependency (the ``openai`` extra brings it)."""
    try:
        from typing import Literal

        from pydantic import BaseModel, ConfigDict, Field
    except ImportError as e:  # pragma: no cover - pydantic ships with the openai SDK
        raise ImportError("the LLM critic validates replies with pydantic: install agentmill[openai] "
                          "(or pydantic>=2)") from e

    class CriticReply(BaseModel):
        model_config = ConfigDict(extra="forbid")
        verdict: Literal["continue", "regenerate"]
        critique: str = Field(max_length=4000)

    return CriticReply


def _validation_message(e) -> str:
    """A pydantic ValidationError as one short line (field: message), without its documentation links."""
    return "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'reply'}: {err['msg']}" for err in e.errors())


class LLMCritic(_LLMRole):
    """The reviser's critic over an LM (temperature 0.0 by default [R]): {verdict: continue|regenerate,
    critique}, pydantic-validated, ≤ 3 asks with the validation error fed back, then the programmatic critic
    (``fallback`` and the errors recorded in the candidate's record)."""

    def __init__(self, lm, *, fallback, run_dir: Path, temperature: float = 0.0) -> None:
        self.caller, self.fallback = LMCaller(lm, run_dir, role="critic", temperature=temperature), fallback

    def critique(self, verdict, target, candidate, pool, attempt: dict, history: list[dict]) -> Critique:
        from pydantic import ValidationError

        model = critic_reply_model()

        def parse(obj: dict, text: str) -> Critique:
            try:
                r = model.model_validate(obj)
            except ValidationError as e:
                raise ValueError(_validation_message(e)) from None
            return Critique(r.verdict, r.critique)

        seed = 2000 * len(pool.observations) + int(attempt["iteration"])
        c, errors = _ask(self.caller, lambda: critic_prompt(verdict, target, candidate, pool, attempt, history),
                         parse, seed)
        if c is None:
            c = self.fallback.critique(verdict, target, candidate, pool, attempt, history)
            c.fallback, c.errors = True, errors
        return c


class LLMReviser(_LLMRole):
    """The repository's inner loop [C `src/improver.py`], up to ``max_iters`` (default MAX_CRITIQUE_ITERS = 10)
    iterations of: propose (≤ ``max_compile_retries`` asks until the code parses, passes the AST policy and runs one
    trial in the sandbox) → aggregate loss on all observations → critic verdict.

    As read in the repository [C `src/improver.py`]: a candidate is *accepted* iff its
    loss is strictly below the best so far (the first compiling candidate is accepted unconditionally, as in the
    code); the critic is asked every iteration; ``continue`` ends the loop only when the candidate was accepted (a
    ``continue`` on a rejected candidate counts as ``regenerate``, so the result is never worse than the running
    best); when no iteration ends that way the best-loss candidate is used. An iteration that yields no compiling
    candidate ends the loop with the running best; if that happens on the first iteration, the programmatic reviser
    takes the step (``fallback``). Every candidate, failed ones included, is a record in the ledgered
    ``candidate`` event (iteration, asks' errors, theory spec, loss, per-observation predictions and errors,
    accepted, the critic's verdict and critique).
    """

    def __init__(self, lm, *, fallback, run_dir: Path, max_iters: int = MAX_CRITIQUE_ITERS, temperature: float = 0.7,
                 critic=None, max_compile_retries: int = MAX_COMPILE_RETRIES) -> None:
        from agentmill.methods.autocog.agents.search import LossCritic

        if max_iters < 1 or max_compile_retries < 1:
            raise ValueError(f"LLMReviser: max_iters ({max_iters}) and max_compile_retries "
                             f"({max_compile_retries}) must be >= 1")
        self.caller = LMCaller(lm, run_dir, role="reviser", temperature=temperature)
        self.fallback, self.max_iters, self.max_compile_retries = fallback, max_iters, max_compile_retries
        self.critic = critic if critic is not None else LLMCritic(lm, fallback=LossCritic(), run_dir=run_dir)

    def bind_ledger(self, ledger) -> None:
        self.caller.bind(ledger)
        if getattr(self.critic, "uses_lm", False):
            self.critic.bind_ledger(ledger)

    def _parse(self, pool):
        design = pool.observations[-1]["design"] if pool.observations else None

        def parse(obj: dict, text: str) -> CodeTheory:
            source = obj.get("predict_source") or fenced_code(text, "predict")
            if not source:
                raise ValueError("predict_source is missing (JSON field or a fenced block labelled predict)")
            check_source(source)
            pol = obj.get("policy", "sample")
            if pol not in ("sample", "argmax"):
                raise ValueError("policy must be sample or argmax")
            th = CodeTheory(str(obj["name"])[:80], str(obj.get("prose", ""))[:2000], source,
                            ParamSpace.from_repo_strings(obj.get("parameters", {})), pol)
            if design is not None:  # one trial at the prior midpoint, in the sandbox: runtime errors are re-asked
                a, b = design.arrays()
                run_batch(source, a[None, :1], b[None, :1], th.params.midpoint(design.context()))
            return th
        return parse

    def revise(self, verdict, target, other, pool, rng) -> Revision:
        n_sim = self.fallback.n_sim
        target_loss, _ = self.fallback._loss(target, pool, n_sim, "cand")
        parse, records, best, feedback = self._parse(pool), [], None, ""
        n_obs = len(pool.observations)
        for it in range(self.max_iters):
            th, errors = _ask(self.caller, lambda: reviser_prompt(verdict, target, other, pool, feedback,
                                                                  iteration=it, max_iters=self.max_iters),
                              parse, 1000 * n_obs + it, attempts=self.max_compile_retries)
            if th is None:
                records.append({"iteration": it, "errors": errors, "compiled": False})
                break
            loss, preds = self.fallback._loss(th, pool, n_sim, "cand")
            accepted = best is None or loss < best[0]
            if accepted:
                best = (loss, th, it)
            obs_errors = [None if p is None or o["real"] is None else abs(p - o["real"])
                          for p, o in zip(preds, pool.observations)]
            attempt = {"iteration": it, "name": th.name, "loss": loss, "obs_preds": preds, "obs_errors": obs_errors,
                       "accepted": accepted, "best_loss": best[0], "target_loss": target_loss}
            crit = self.critic.critique(verdict, target, th, pool, attempt, records)
            records.append({**attempt, "theory": th.spec, "errors": errors, "critic": crit.to_json()})
            if crit.verdict == "continue" and accepted:
                break
            feedback = self._feedback(records, best)
        if best is None:
            r = self.fallback.revise(verdict, target, other, pool, rng)
            r.candidates.append({"fallback": True, "llm_candidates": records})
            return r
        ended = "critic_continue" if records[-1].get("critic", {}).get("verdict") == "continue" and \
            records[-1].get("accepted") else ("no_compiling_candidate" if not records[-1].get("compiled", True)
                                              else "iterations_exhausted")
        records.append({"chosen_iteration": best[2], "ended": ended, "target_loss": target_loss})
        return Revision(best[1], best[0], best[0] < target_loss, candidates=records)

    @staticmethod
    def _feedback(records: list[dict], best) -> str:
        """What the next proposal sees: every earlier iteration (loss, accepted/rejected, the critic's advice) and
        the running best to build on (never a rejected attempt, as in the repository's improver)."""
        lines = []
        for r in records:
            if "loss" not in r:
                lines.append(f"iteration {r['iteration'] + 1}: no compiling candidate ({(r['errors'] or ['?'])[-1]})")
                continue
            lines.append(f"iteration {r['iteration'] + 1} ({r['name']}): aggregate loss {r['loss']:.3f}, "
                         f"{'ACCEPTED' if r['accepted'] else 'REJECTED'}; critic: {r['critic']['verdict']} — "
                         f"{r['critic']['critique'][:500]}")
        base = f"\nBuild on the best candidate so far ({best[1].name}, loss {best[0]:.3f}):\n{best[1].source}"
        return "\n".join(lines) + base
