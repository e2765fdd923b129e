"""Workflows (Conductor-style [A][S]): three equal-length lists — ``workers``, ``subtasks``, ``access`` — with every
index in ``access[t]`` < t (a DAG in topological order), at most 8 steps. Step t sends ``subtasks[t]`` (with
``{query}``, ``{k}`` = step k's output and ``{k.i}`` = part i of step k's ``" || "``-separated output filled in; a
second pass resolves references a filled part introduced) plus the outputs of the steps in ``access[t]`` — nothing
else (intra-workflow isolation) — to ``workers[t]``. The last step's output is the answer. A per-session ``cache``
of (worker, filled subtask) → result is shared across workflows (inter-workflow memory [S]).

``TemplateComposer`` (LLM-free) holds a library of hand-written templates — the decomposers encode the composite
templates, so these workflows are engineered, not learned. ``LMComposer`` asks an LM for the three lists as JSON
(untrained; ≤ 3 re-asks with the validation error, then ``None`` so the caller falls back to the fast route).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmill.methods.router.workers import StepOutput, WorkerResult

MAX_STEPS = 8


class WorkflowError(ValueError):
    """A malformed workflow (the message names the list and step)."""


@dataclass(frozen=True)
class Workflow:
    workers: tuple[str, ...]
    subtasks: tuple[str, ...]
    access: tuple[tuple[int, ...], ...]
    name: str = ""

    def __post_init__(self) -> None:
        n = len(self.workers)
        if not (len(self.subtasks) == n == len(self.access)):
            raise WorkflowError(f"workflow {self.name!r}: workers, subtasks and access must have equal length, got "
                                f"{n}, {len(self.subtasks)}, {len(self.access)}")
        if not 1 <= n <= MAX_STEPS:
            raise WorkflowError(f"workflow {self.name!r}: needs 1..{MAX_STEPS} steps, got {n}")
        for t, acc in enumerate(self.access):
            for k in acc:
                if not isinstance(k, int) or not 0 <= k < t:
                    raise WorkflowError(f"workflow {self.name!r}: step {t} accesses step {k}; only earlier steps "
                                        f"0..{t - 1} may be accessed")

    def check_workers(self, known: Sequence[str]) -> None:
        unknown = [w for w in self.workers if w not in set(known)]
        if unknown:
            raise WorkflowError(f"workflow {self.name!r}: unknown workers {unknown}; known: {sorted(known)}")


@dataclass
class WorkflowResult:
    answer: str | None
    cost: float
    latency: float
    steps: list[dict[str, Any]] = field(default_factory=list)


_REF = re.compile(r"\{(query|\d+)(?:\.(\d+))?\}")


def _fill(template: str, query: str, outputs: Mapping[int, str | None]) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) == "query":
            return query
        k = int(m.group(1))
        if k not in outputs:
            raise WorkflowError(f"reference {{{k}}} to a step outside this step's access list")
        text = outputs[k] or ""
        if m.group(2) is not None:
            parts = text.split(" || ")
            i = int(m.group(2))
            return parts[i] if i < len(parts) else ""
        return text

    once = _REF.sub(sub, template)
    return _REF.sub(sub, once) if _REF.search(once) else once


def run_workflow(wf: Workflow, query: str, workers: Mapping[str, Any], *, isolation: bool = True,
                 cache: dict | None = None) -> WorkflowResult:
    """Run ``wf`` on ``query``. With ``isolation`` a step sees only its ``access`` outputs (and may reference only
    them); without it, every earlier output. ``cache`` reuses results across workflows of one session."""
    wf.check_workers(list(workers))
    outputs: dict[int, str | None] = {}
    res = WorkflowResult(None, 0.0, 0.0)
    for t, (w, sub, acc) in enumerate(zip(wf.workers, wf.subtasks, wf.access)):
        visible = acc if isolation else tuple(range(t))
        try:
            text = _fill(sub, query, {k: outputs[k] for k in visible})
        except WorkflowError:
            outputs[t] = None
            res.steps.append({"step": t, "worker": w, "subtask": sub, "answer": None, "error": "reference"})
            continue
        context = tuple(StepOutput(k, wf.workers[k], outputs[k]) for k in visible)
        key = (w, text, tuple((c.step, c.text) for c in context))
        hit = cache is not None and key in cache
        r: WorkerResult = cache[key] if hit else workers[w].answer(text, context)
        if cache is not None and not hit:
            cache[key] = r
        outputs[t] = r.answer
        if not hit:
            res.cost += r.cost
            res.latency += r.latency
        res.steps.append({"step": t, "worker": w, "subtask": text, "answer": r.answer, "cached": hit})
    res.answer = outputs[len(wf.workers) - 1]
    return res


TEMPLATES: dict[str, Workflow] = {
    "wf:numnorm>arith": Workflow(("solver:numnorm", "solver:arith"), ("{query}", "{0}"), ((), (0,)),
                                 "wf:numnorm>arith"),
    "wf:decompose>lookup2>arith": Workflow(
        ("solver:decompose", "solver:lookup", "solver:lookup", "solver:arith"),
        ("{query}", "{0.0}", "{0.1}", "{0.2}"), ((), (0,), (0,), (0, 1, 2)), "wf:decompose>lookup2>arith"),
}


def vote_template(lm_worker: str = "hf:smollm2") -> Workflow:
    return Workflow((lm_worker, "solver:arith", "solver:lookup", "solver:vote"), ("{query}", "{query}", "{query}", ""),
                    ((), (), (), (0, 1, 2)), f"wf:vote({lm_worker},arith,lookup)")


class TemplateComposer:
    """The LLM-free composer: a named library of workflow templates (each a pseudo-worker of the router)."""

    def __init__(self, lm_worker: str = "hf:smollm2") -> None:
        v = vote_template(lm_worker)
        self.templates = {**TEMPLATES, v.name: v}

    def names(self) -> list[str]:
        return list(self.templates)

    def compose(self, name: str) -> Workflow:
        if name not in self.templates:
            raise KeyError(f"unknown workflow template {name!r}; choose one of {self.names()}")
        return self.templates[name]


COMPOSER_PROMPT = ("You plan workflows over workers. Workers: {catalogue}.\nReturn only JSON with three equal-length "
                   "lists: \"workers\" (worker ids), \"subtasks\" (text; {{query}} is the question, {{k}} is step k's "
                   "output) and \"access\" (for each step, the earlier step indices it may read). At most 8 steps.\n"
                   "Question: {query}\nJSON:")


class LMComposer:
    """An LM writes the workflow as JSON (untrained here). Invalid JSON or an invalid workflow is re-asked ≤ 3 times
    with the error appended; then :meth:`compose` returns ``None`` and ``fallbacks`` counts it."""

    def __init__(self, lm: Any, catalogue: Sequence[str], max_asks: int = 3) -> None:
        self.lm, self.catalogue, self.max_asks = lm, list(catalogue), max_asks
        self.fallbacks = 0
        self.errors: list[str] = []

    def compose(self, query: str) -> Workflow | None:
        from agentmill.lm.base import GenerateConfig
        prompt = COMPOSER_PROMPT.format(catalogue=", ".join(self.catalogue), query=query)
        for _ in range(self.max_asks):
            text = self.lm.generate([prompt], GenerateConfig(max_new_tokens=160, temperature=0.0))[0].text
            try:
                m = re.search(r"\{.*\}", text, re.S)
                doc = json.loads(m.group(0) if m else text)
                wf = Workflow(tuple(doc["workers"]), tuple(doc["subtasks"]),
                              tuple(tuple(int(k) for k in a) for a in doc["access"]), "lm")
                wf.check_workers(self.catalogue)
                return wf
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                err = f"{type(e).__name__}: {e}"
                self.errors.append(err)
                prompt += f"{text}\nThat was invalid ({err}). Return corrected JSON only.\nJSON:"
        self.fallbacks += 1
        return None
