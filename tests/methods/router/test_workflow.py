"""Workflows: validation, isolation, the shared cache, the templates, and the LM composer's re-asks."""

from __future__ import annotations

import pytest

from agentmill.methods.router.workers import HELPERS, SOLVERS, make_worker
from agentmill.methods.router.workflow import (TEMPLATES, LMComposer, TemplateComposer, Workflow, WorkflowError,
                                               run_workflow)


@pytest.fixture(scope="module")
def workers() -> dict:
    return {f"solver:{n}": make_worker(f"solver:{n}") for n in [*SOLVERS, *HELPERS]}


def test_validation() -> None:
    with pytest.raises(WorkflowError, match="earlier"):
        Workflow(("a", "b"), ("x", "y"), ((), (1,)))
    with pytest.raises(WorkflowError, match="equal length"):
        Workflow(("a",), ("x", "y"), ((),))
    with pytest.raises(WorkflowError, match="1..8"):
        Workflow(("a",) * 9, ("x",) * 9, ((),) * 9)
    with pytest.raises(WorkflowError, match="unknown workers"):
        Workflow(("nope",), ("x",), ((),)).check_workers(["a"])


def test_templates_solve_the_composites(workers) -> None:
    r = run_workflow(TEMPLATES["wf:numnorm>arith"], "What is thirty-seven plus fifty-eight?", workers)
    assert r.answer == "95" and len(r.steps) == 2
    r = run_workflow(TEMPLATES["wf:decompose>lookup2>arith"],
                     "What is the difference between the atomic numbers of iron and gold?", workers)
    assert r.answer == "53" and [s["answer"] for s in r.steps[1:3]] == ["26", "79"]
    r = run_workflow(TEMPLATES["wf:decompose>lookup2>arith"], "What is 2 + 2?", workers)
    assert r.answer is None


def test_isolation_blocks_unaccessed_outputs(workers) -> None:
    wf = Workflow(("solver:numnorm", "solver:arith"), ("{query}", "{0}"), ((), ()), "leaky")
    iso = run_workflow(wf, "What is two plus three?", workers, isolation=True)
    assert iso.answer is None and iso.steps[1]["error"] == "reference"
    open_ = run_workflow(wf, "What is two plus three?", workers, isolation=False)
    assert open_.answer == "5"


def test_shared_cache_reuses_steps(workers) -> None:
    cache: dict = {}
    wf = TEMPLATES["wf:numnorm>arith"]
    a = run_workflow(wf, "What is two plus three?", workers, cache=cache)
    b = run_workflow(wf, "What is two plus three?", workers, cache=cache)
    assert a.answer == b.answer == "5" and all(s["cached"] for s in b.steps) and b.cost == 0.0


def test_template_composer_names() -> None:
    c = TemplateComposer("hf:smollm2")
    assert "wf:vote(hf:smollm2,arith,lookup)" in c.names() and len(c.names()) == 3
    with pytest.raises(KeyError):
        c.compose("nope")


def test_lm_composer_reasks_then_falls_back() -> None:
    from agentmill.lm.scripted import ScriptedLM
    good = '{"workers": ["solver:arith"], "subtasks": ["{query}"], "access": [[]]}'
    lm = ScriptedLM(["not json", good])
    comp = LMComposer(lm, ["solver:arith"])
    wf = comp.compose("What is 2 + 2?")
    assert wf is not None and wf.workers == ("solver:arith",) and len(comp.errors) == 1
    bad = LMComposer(ScriptedLM(['{"workers": ["x"], "subtasks": ["a"], "access": [[]]}'] * 3), ["solver:arith"])
    assert bad.compose("q") is None and bad.fallbacks == 1 and len(bad.errors) == 3
