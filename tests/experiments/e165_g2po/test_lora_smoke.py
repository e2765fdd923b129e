"""E165 G-10 (optional LoRA smoke): the smoke profile through the CLI's runner; the claim can never be judged."""

from __future__ import annotations

from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.runner import record_path, run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_lora_smoke")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and record_path(tmp_path, "smoke", exp.id).exists()
    assert rec.verdicts == {"G-10": "not_judged"}
    m = rec.metrics
    for est in ("grpo", "gigpo", "g2po"):
        assert 0 <= m[f"heldout_success_{est}"].value <= 1 and m[f"seconds_{est}_update"].value > 0
    assert m["seconds_g2po_graph"].value > 0 == m["seconds_grpo_graph"].value
    assert "heldout_gain_g2po_grpo_observed" in m and "heldout_gain_g2po_grpo" not in m
    assert rec.data["not_judged"]["heldout_gain_g2po_grpo"].startswith("1 seed by design")
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 3000


def test_the_claim_is_not_judged_by_design_at_any_profile() -> None:
    exp = get("e165.g2po_lora_smoke")
    metrics = {"heldout_gain_g2po_grpo_observed": Estimate.exact(0.5)}  # what measure records, even when positive
    data = {"not_judged": {"heldout_gain_g2po_grpo": "1 seed by design"}}  # what measure notes (smoke test above)
    for profile in ("quick", "full"):
        assert exp.judge_with_reasons(profile, metrics, data) == ({"G-10": "not_judged"}, {"G-10": "1 seed by design"})
