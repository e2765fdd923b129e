"""U-2 (`e167.wm_warmup_smollm2`): admission of W-4's warm-up adapter from its card, the precondition verdict, and
the plan-only quick run (no model is loaded here)."""

from __future__ import annotations

import json

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.e167_world_model.warmup_smollm2 import admission
from agentmill.experiments.protocol import RunContext
from agentmill.lm.finetune import CARD_FILE

ID = "e167.wm_warmup_smollm2"


def _card(tmp_path, passed: bool):
    d = tmp_path / "wm-sft-0123456789abcdef"
    d.mkdir()
    gates = [{"id": "G-WM1", "passed": True, "value": 1.0, "threshold": 0.9, "detail": {"n": 24}},
             {"id": "G-WM2", "passed": passed, "value": 0.2 if passed else -0.05, "threshold": 0.1, "detail": {}}]
    (d / CARD_FILE).write_text(json.dumps({"validation": {"gates": gates, "validated": passed},
                                           "validated": passed}))
    return d


def test_recipe_fields_repeat_w4_full_setup() -> None:
    w4, u2 = get("e167.wm_recipe_smollm2").setups["full"], get(ID).setups["full"]
    for f in ("pipeline", "n_sft", "epochs", "lr", "micro_batch", "grad_accum", "dtype", "seed", "wm"):
        assert getattr(u2, f) == getattr(w4, f), f


def test_admission_reads_the_gates_from_the_card(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ok, reason, gates = admission(_card(tmp_path / "a", False))
    assert not ok and reason.startswith("precondition not met") and "G-WM2 -0.05 (threshold 0.1)" in reason
    assert [g["id"] for g in gates] == ["G-WM1", "G-WM2"]
    ok, reason, _ = admission(_card(tmp_path / "b", True))
    assert ok and reason == "every gate passed"
    ok, reason, gates = admission(tmp_path / "missing")
    assert not ok and "does not exist" in reason and gates == []


def test_failed_gates_make_the_claim_inconclusive_and_quick_is_plan_only(tmp_path) -> None:
    exp = get(ID)
    v, why = exp.judge_with_reasons("full", {}, {"precondition": "precondition not met: gate(s) G-WM2 failed"})
    assert v == {"E167-U2": "inconclusive"} and why["E167-U2"].startswith("precondition not met")
    ctx = RunContext(profile="quick", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["quick"], ctx)
    assert m == {} and "full only" in ctx.data["plan_only"]
    assert exp.judge("quick", m, ctx.data) == {"E167-U2": "not_judged"}
