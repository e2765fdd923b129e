"""E166 experiments: every smoke profile runs measure() and plots(); the precondition without a table."""

from __future__ import annotations

import dataclasses

import pytest

from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext
from agentmill.experiments.runner import run_experiment

IDS = ("e166.table", "e166.fast", "e166.workflow", "e166.controls", "e166.perf")


@pytest.mark.slow
@pytest.mark.parametrize("exp_id", IDS)
def test_smoke(exp_id, tmp_path) -> None:
    exp = get(exp_id)
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    assert rec.data["precondition"] == "met"
    measured = {c.metric for c in exp.claims} & set(rec.metrics)
    assert measured, exp_id
    for m in measured:
        e = rec.metrics[m]
        assert e.value == e.value  # not NaN
    exp.plots(rec.data, tmp_path)


@pytest.mark.parametrize("exp_id", IDS)
def test_missing_table_is_a_precondition(exp_id, tmp_path) -> None:
    exp = get(exp_id)
    setup = dataclasses.replace(exp.setups["quick"], table=str(tmp_path / "absent.jsonl"))
    ctx = RunContext(profile="quick", model="none", executor=None, work_dir=tmp_path)
    assert exp.measure(setup, ctx) == {}
    assert ctx.data["precondition"].startswith("precondition not met: no recorded SmolLM2 table")
    verdicts, reasons = exp.judge_with_reasons("quick", {}, ctx.data)
    assert set(verdicts.values()) <= {"inconclusive", "not_judged"}
