"""compose_injection_control.belief_injection: the smoke measure and plot (fixture package, scripted arm, no
endpoint -> precondition), and the endpoint path with fakes (scripted localizer as ``lm``, an agent that submits at
once), whose X-1 numbers are recorded observed-only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

ID = "compose_injection_control.belief_injection"


def _ctx(tmp_path: Path, loader=None) -> RunContext:
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path,
                      lm_loader=loader)


def test_registered_reported_only() -> None:
    exp = get(ID)
    assert [c.metric for c in exp.claims] == ["x1_resolve_belief_minus_filter", "x1_tokens_belief_minus_filter"]
    assert exp.parallel_safe and exp.setups["quick"].corpus == "fixture" and not exp.setups["full"].lm


def test_smoke_measure_and_plot(tmp_path: Path) -> None:
    exp = get(ID)
    ctx = _ctx(tmp_path)
    out = exp.measure(exp.setups["smoke"], ctx)
    assert ctx.data["precondition"].startswith("precondition not met: no endpoint")
    assert "x1_resolve_belief_minus_filter" not in out and "endpoint_resolve_belief" not in out
    for p in ("never", "always", "filter", "belief", "oracle"):
        assert 0 <= out[f"scripted_resolve_{p}"].value <= 1
    assert out["scripted_resolve_never"].value == 0.0  # the scripted repairer has nothing to try without a case file
    d = ctx.data["scripted"]
    assert set(d["calibration"]).isdisjoint(d["evaluation"]) and d["calibration"] and d["evaluation"]
    assert len(d["calibration"]) + len(d["evaluation"]) == len(ctx.data["rows"])
    paths = exp.plots(ctx.data, tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)
    verdicts = exp.judge("full", out, ctx.data)
    assert set(verdicts.values()) == {"inconclusive"}  # no endpoint: never a verdict from the scripted arm


@pytest.mark.slow
def test_endpoint_path_with_fakes_is_observed_only(tmp_path: Path) -> None:
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.sherloc import ScriptedLocalizer

    fakes = {"openai:loc@x": ScriptedLocalizer(), "openai:agent@x": ScriptedLM(lambda text: "CALL submit {}")}
    exp = get(ID)
    s = replace(exp.setups["smoke"], lm="openai:loc@x", agent="openai:agent@x", k=2)
    ctx = _ctx(tmp_path, fakes.__getitem__)
    out = exp.measure(s, ctx)
    assert "precondition" not in ctx.data
    assert "x1_resolve_belief_minus_filter_observed" in out and "x1_resolve_belief_minus_filter" not in out
    assert out["endpoint_resolve_always"].value == 0.0  # the fake agent submits the unchanged code
    assert out["endpoint_tokens_never"].value > 0
    rows = ctx.data["endpoint_rows"]
    assert all(r["features"]["agree_files"] == 1.0 for r in rows)  # k = 2 identical scripted runs agree
    verdicts, reasons = exp.judge_with_reasons("full", out, ctx.data)
    assert set(verdicts.values()) == {"not_judged"} and "reported only" in next(iter(reasons.values()))
    assert len(exp.plots(ctx.data, tmp_path)) == 1
