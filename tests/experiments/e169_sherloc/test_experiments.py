"""Smoke runs of every E169 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered() -> None:
    from agentmill.experiments.e169_sherloc import MODULES

    assert MODULES == ("tools", "loop", "localize", "injection", "perf")
    assert get("e169.sherloc_tools").parallel_safe and not get("e169.sherloc_perf").parallel_safe


def test_tools_smoke(tmp_path) -> None:
    exp = get("e169.sherloc_tools")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["s1_checks_passed_share"].value == 1.0, [k for k, v in ctx.data["checks"].items() if not v]
    assert m["s9_all_files_acc1"].value == 1.0 and m["s9_precision_times_files_max"].value == pytest.approx(1.0)
    assert exp.judge("quick", m) == {"E169-S1": "supported", "E169-S9a": "supported", "E169-S9b": "supported"}
    bad = dict(m, s1_checks_passed_share=Estimate.exact(0.95, n=24))
    assert exp.judge("quick", bad)["E169-S1"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow  # builds and mines the fixture package (~8 sandboxed pytest runs) for the tests below
def test_loop_smoke(tmp_path) -> None:
    exp = get("e169.sherloc_loop")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["s2_crashes"].value == 0 and m["s2_labelled_exit_share"].value == 1.0
    assert all(r["reason"] for r in ctx.data["rows"])
    v = exp.judge("full", dict(m, s2_crashes=Estimate.exact(1, n=2)))
    assert v["E169-S2a"] == "not_supported"
    quick = exp.for_profile("quick", m, ctx.data)  # quick is a pipeline check (scripted arm)
    assert exp.judge("quick", quick, ctx.data)["E169-S2a"] == "not_judged"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow
def test_localize_smoke_records_precondition(tmp_path) -> None:
    exp = get("e169.sherloc_localize")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert "s3_acc1_minus_bm25" not in m and "bm25_acc1" in m
    assert ctx.data["precondition"].startswith("precondition not met: no endpoint")
    v = exp.judge("quick", m, ctx.data)
    assert v == {"E169-S3a": "inconclusive", "E169-S3b": "inconclusive"}
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow
def test_localize_scripted_arm_is_never_judged(tmp_path) -> None:
    import dataclasses

    exp = get("e169.sherloc_localize")
    ctx = _ctx(tmp_path)
    s = dataclasses.replace(exp.setups["smoke"], lm="scripted:sherloc-localizer")
    m = exp.measure(s, ctx)
    assert "s3_acc1_minus_bm25_observed" in m
    assert exp.judge("quick", m, ctx.data)["E169-S3a"] == "not_judged"


@pytest.mark.slow
def test_injection_smoke(tmp_path) -> None:
    exp = get("e169.sherloc_injection")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert {"scripted_resolve_none", "scripted_resolve_injected"} <= set(m)
    assert m["scripted_resolve_none"].value == 0.0  # no case file: the scripted repairer has nothing to try
    assert ctx.data["precondition"].startswith("precondition not met")
    assert set(exp.judge("quick", m, ctx.data).values()) == {"inconclusive"}
    assert [p.name for p in exp.plots(ctx.data, tmp_path)] == ["injection_scripted.png", "filter_acc1.png"]


@pytest.mark.slow
def test_perf_smoke(tmp_path) -> None:
    exp = get("e169.sherloc_perf")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["pf4_speedup"].value > 0 and "pf6_overhead_s_observed" in m and "pf7_speedup" not in m
    assert exp.judge("quick", m, ctx.data)["E169-PF7"] == "not_judged"
    assert ctx.data["pf5"]["work_tree_unchanged"]
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow
def test_pf7_kept_cache_turn_is_timed_against_a_reprefill_and_plotted(tmp_path) -> None:
    from dataclasses import replace

    from agentmill.experiments.e169_sherloc.perf import SETUPS, kv_reuse_timing, plots
    from agentmill.lm import load_lm

    lm = load_lm("tiny:new?layers=1&d=32&heads=2&max_len=2048&seed=2")
    s = replace(SETUPS["smoke"], pf7_model="tiny:new", pf7_history_tokens=600, pf7_new_tokens=8)
    est, pf7 = kv_reuse_timing(lm, s)
    rows = pf7["rows"]
    assert len(rows) == s.repeats and est.value > 0
    assert all(r["prompt_tokens"] >= 600 and r["reused"] > 500 and r["prefilled_fresh"] == r["prompt_tokens"]
               for r in rows)
    data = {"cpu": {"model": "x"}, "pf4": {"ratios": [5.0]}, "pf5": {"git_s": [1.0], "checkout_s": [2.0]},
            "pf6": {"repo": "fixture", "bare_s": [1.0], "sandboxed_s": [1.2]}, "pf7": pf7}
    assert [p.name for p in plots(data, tmp_path)] == ["perf.png"]


@pytest.mark.slow
def test_localize_endpoint_arm_renamed_view_thinking_arms_and_replay(tmp_path) -> None:
    """S-3, S-7 and S-8 through a real ``openai:`` endpoint (a loopback stub answering as the scripted localizer):
    the renamed view is localized too, the thinking arms send their request fields, and the recording made on the
    way answers a second run with no request at all."""
    import dataclasses
    import json

    from agentmill.core.types import Message
    from agentmill.lm.loopback import LoopbackServer
    from agentmill.methods.sherloc import ScriptedLocalizer

    scripted = ScriptedLocalizer()
    with LoopbackServer(lambda req: scripted.reply([Message.from_dict(m) for m in req.body["messages"]]),
                        model="stub") as srv:
        exp = get("e169.sherloc_localize")
        rec = tmp_path / "rec.jsonl"
        s = dataclasses.replace(exp.setups["smoke"], lm=srv.lm_spec, replay=str(rec), replay_mode="record-missing",
                                thinking_on='{"chat_template_kwargs": {"enable_thinking": true}}',
                                thinking_off='{"chat_template_kwargs": {"enable_thinking": false}}')
        ctx = _ctx(tmp_path / "a")
        m = exp.measure(s, ctx)
        sent = srv.requests
        bodies = [r.body for r in srv.log]
    assert sent > 0 and {"s3_acc1_minus_bm25", "s7_acc1_drop_seeded", "s8_recall1_on_minus_off"} <= set(m)
    assert {"thinking_on_acc1", "renamed_acc1"} <= set(ctx.data["rows"][0])
    toggles = [b.get("chat_template_kwargs") for b in bodies]
    assert {"enable_thinking": True} in toggles and {"enable_thinking": False} in toggles and None in toggles
    renamed_prompts = [b for b in bodies if "pkg_" in json.dumps(b["messages"])]
    assert renamed_prompts  # the renamed view reached the model
    assert rec.exists() and rec.with_suffix(".thinking_on.jsonl").exists()
    replayed = exp.measure(dataclasses.replace(s, replay_mode="replay", lm="openai:stub@http://127.0.0.1:9/v1"),
                           _ctx(tmp_path / "b"))
    assert {k: v.value for k, v in replayed.items()} == {k: v.value for k, v in m.items()}
