"""LLM-driven roles over :mod:`agentmill.lm` (spec autocog §6.3). Each call is recorded (request hash -> reply) in
``run_dir/lm_calls.jsonl`` (appended and fsynced) *before* the reply is used; a rerun or resume replays recorded
replies instead of asking again (RecordReplay). Schema violations are retried (≤ 3, the error fed back); a role
that still fails falls back to its programmatic twin for that step (``fallback`` recorded).

Deviation: the advocate picks its metric from the §6.4 templates (LLM-written metric code is not implemented)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from agentmill.methods.autocog.agents.base import Proposal, Revision, Verdict
from agentmill.methods.autocog.agents.prompts import (advocate_prompt, arbiter_prompt, first_json, reviser_prompt)
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.metrics import TEMPLATE_NAMES, TemplateMetric, templates_for
from agentmill.methods.autocog.sandbox import SandboxError, check_source
from agentmill.methods.autocog.theory import CodeTheory, ParamSpace

MAX_PARSE_RETRIES = 3


class LMCaller:
    """Record-before-use LM calls with replay by request hash."""

    def __init__(self, lm, run_dir: Path, *, temperature: float, max_new_tokens: int = 1024) -> None:
        self.lm, self.path = lm, Path(run_dir) / "lm_calls.jsonl"
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.cache: dict[str, str] = {}
        self.prompts: list[str] = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # torn last line: that call is simply asked again
                self.cache[r["request_sha256"]] = r["response"]

    def __call__(self, prompt: str, *, seed: int) -> str:
        from agentmill.lm import GenerateConfig

        key = hashlib.sha256(json.dumps([prompt, self.temperature, self.max_new_tokens, seed]).encode()).hexdigest()
        self.prompts.append(prompt)
        if key in self.cache:
            return self.cache[key]
        cfg = GenerateConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=seed)
        comp = self.lm.generate([prompt], cfg)[0]
        rec = {"request_sha256": key, "model": getattr(self.lm, "spec", "?"), "temperature": self.temperature,
               "seed": seed, "response": comp.text, "finish_reason": comp.finish_reason}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.cache[key] = comp.text
        return comp.text


def _ask(caller: LMCaller, build, parse, seed: int):
    """Ask, parse; on failure re-ask with the error appended (≤ 3). Returns (value, errors) or (None, errors)."""
    errors: list[str] = []
    for attempt in range(MAX_PARSE_RETRIES):
        prompt = build() + ("" if not errors else f"\n\nYour previous reply was invalid: {errors[-1]}. Try again.")
        try:
            return parse(first_json(caller(prompt, seed=seed * 10 + attempt))), errors
        except (ValueError, KeyError, TypeError, SandboxError) as e:
            errors.append(str(e)[:300])
    return None, errors


class LLMAdvocate:
    def __init__(self, lm, *, fallback, run_dir: Path, name: str = "advocate", temperature: float = 0.7) -> None:
        self.caller, self.fallback, self.name = LMCaller(lm, run_dir, temperature=temperature), fallback, name

    def propose(self, own, opponent, pool, rng) -> Proposal:
        seed = int(rng.integers(2**31))

        def parse(obj: dict) -> Proposal:
            d = obj["design"]
            design = Design.make(d["validities"], d["pairs_a"], d["pairs_b"], d.get("rating_max", 1),
                                 rationale=str(d.get("rationale", ""))[:500])
            name = obj["metric"]["name"]
            if name not in TEMPLATE_NAMES:
                raise ValueError(f"metric name must be one of {TEMPLATE_NAMES}")
            mets = [m for m in templates_for(own, opponent, cardinal=design.rating_max > 1) if m.name == name]
            if not mets:
                raise ValueError(f"metric {name} is not applicable to these theories/design")
            bad = [p for p in zip(design.pairs_a, design.pairs_b) if p in pool.exclude_pairs or p[::-1] in pool.exclude_pairs]
            if bad:
                raise ValueError("design uses held-out battery pairs")
            return Proposal(design, mets[0], rationale=design.rationale)

        prop, errors = _ask(self.caller, lambda: advocate_prompt(own, opponent, pool, []), parse, seed)
        if prop is None:
            prop = self.fallback.propose(own, opponent, pool, rng)
            prop.extra["fallback"] = True
        prop.extra["llm_errors"] = errors
        return prop


class LLMArbiter:
    def __init__(self, lm, *, fallback, run_dir: Path, temperature: float = 0.2) -> None:
        self.caller, self.fallback = LMCaller(lm, run_dir, temperature=temperature), fallback

    def judge(self, slot1, slot2, pool) -> Verdict:
        def parse(obj: dict) -> Verdict:
            if obj["verdict"] not in ("new_model", "new_theory") or obj["target_theory_idx"] not in (1, 2):
                raise ValueError("verdict must be new_model|new_theory and target_theory_idx 1|2")
            return Verdict(obj["verdict"], int(obj["target_theory_idx"]), str(obj.get("interpretation", ""))[:1000],
                           str(obj.get("recommendation", ""))[:1000])

        v, errors = _ask(self.caller, lambda: arbiter_prompt(slot1, slot2, pool), parse, len(pool.observations))
        if v is None:
            v = self.fallback.judge(slot1, slot2, pool)
            v.recommendation = f"[fallback after {len(errors)} invalid replies] " + v.recommendation
        return v


class LLMReviser:
    """Inner loop (≤ ``max_iters``): propose -> sandbox check -> aggregate loss on all observations; keep the best.
    Falls back to the programmatic reviser when no candidate compiles."""

    def __init__(self, lm, *, fallback, run_dir: Path, max_iters: int = 3, temperature: float = 0.7) -> None:
        self.caller, self.fallback, self.max_iters = LMCaller(lm, run_dir, temperature=temperature), fallback, max_iters

    def revise(self, verdict, target, other, pool, rng) -> Revision:
        best, feedback, cands = None, "", []
        for it in range(self.max_iters):
            def parse(obj: dict) -> CodeTheory:
                check_source(obj["predict_source"])
                pol = obj.get("policy", "sample")
                if pol not in ("sample", "argmax"):
                    raise ValueError("policy must be sample or argmax")
                return CodeTheory(str(obj["name"])[:80], str(obj.get("prose", ""))[:2000], obj["predict_source"],
                                  ParamSpace.from_repo_strings(obj.get("parameters", {})), pol)

            th, errors = _ask(self.caller, lambda: reviser_prompt(verdict, target, other, pool, feedback), parse,
                              1000 * len(pool.observations) + it)
            if th is None:
                feedback = f"attempt {it + 1} failed: {errors[-1] if errors else '?'}"
                cands.append({"iteration": it, "errors": errors})
                continue
            loss, preds = self.fallback._loss(th, pool, self.fallback.n_sim, "cand")
            cands.append({"iteration": it, "name": th.name, "loss": loss, "errors": errors})
            if best is None or loss < best[0]:
                best = (loss, th)
            feedback = f"attempt {it + 1} ({th.name}) had aggregate loss {loss:.3f}"
        if best is None:
            r = self.fallback.revise(verdict, target, other, pool, rng)
            r.candidates.append({"fallback": True, "llm_candidates": cands})
            return r
        target_loss, _ = self.fallback._loss(target, pool, self.fallback.n_sim, "cand")
        return Revision(best[1], best[0], best[0] < target_loss, candidates=cands)
