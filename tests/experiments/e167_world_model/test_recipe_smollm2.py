"""W-4 (`e167.wm_recipe_smollm2`): the tiny stand-in runs measure and plots; a failed gate makes both claims
inconclusive with the precondition note; passing metrics are judged on their pre-registered thresholds."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

ID = "e167.wm_recipe_smollm2"


def test_registered_full_only_on_smollm2() -> None:
    exp = get(ID)
    assert exp.quick_check and not exp.parallel_safe
    assert exp.setups["full"].wm == "hf:smollm2"
    assert all(exp.setups[p].wm.startswith("tiny:") for p in ("smoke", "quick"))
    assert {c.threshold for c in exp.claims} == {0.15, 0.02}


def test_precondition_not_met_gives_inconclusive_and_passing_metrics_are_judged() -> None:
    exp = get(ID)
    data = {"precondition": "precondition not met: the SmolLM2 LoRA-SFT adapter failed G-WM2 0.01 (threshold 0.1)"}
    metrics = {"f1_sft": Estimate(0.3, 0.2, 0.4, n=32, method="b", n_boot=100)}
    verdicts, reasons = exp.judge_with_reasons("full", metrics, data)
    assert set(verdicts.values()) == {"inconclusive"}
    assert all(r.startswith("precondition not met") for r in reasons.values())
    good = {"w4_sft_minus_zeroshot": Estimate(0.2, 0.16, 0.25, n=32, method="b", n_boot=100),
            "w4_cptsft_minus_sft": Estimate(0.0, -0.04, 0.01, n=32, method="b", n_boot=100)}
    v = exp.judge("full", good, {})
    assert v == {"E167-W4-sft": "supported", "E167-W4-cpt": "not_supported"}


@pytest.mark.slow  # ~4 s: a 1-layer byte stand-in trained 2 steps, three arms decoded on a handful of items
def test_smoke_stand_in_measures_and_plots(tmp_path) -> None:
    exp = get(ID)
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    for k in ("f1_sft", "f1_zero_shot", "f1_cpt_sft", "f1_copy_previous", "gate_g_wm1", "gate_g_wm2",
              "gate_g_wm3", "w4_sft_minus_zeroshot", "w4_cptsft_minus_sft"):
        assert k in m, k
    assert [g["id"] for g in ctx.data["gates"]] == ["G-WM1", "G-WM2", "G-WM3"]
    assert "precondition" not in ctx.data  # the stand-in gates nothing
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    q = exp.for_profile("quick", m, dict(ctx.data))
    assert "w4_sft_minus_zeroshot_observed" in q and "w4_sft_minus_zeroshot" not in q
    assert len(exp.plots(ctx.data, tmp_path)) == 1
