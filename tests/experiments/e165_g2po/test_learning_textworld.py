"""E165 G-7 (learning on TextWorld): the smoke profile through the CLI's runner. Generates one TextWorld game
offline with tw-make on a cold cache (~10 s), hence slow."""

from __future__ import annotations

import pytest

from agentmill.experiments import get
from agentmill.experiments.runner import run_experiment

pytestmark = pytest.mark.slow


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_learning_textworld")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and rec.verdicts == {"G-7": "not_judged"}
    m = rec.metrics
    assert "auc_diff_g2po_grpo" not in m and "auc_diff_g2po_grpo_observed" in m
    assert 0 < m["merge_rate"].value < 1 and m["rollout_steps_per_s"].value > 0
    arms = rec.data["logs"]["main"]["arms"]
    assert {a["estimator"] for a in arms} == {"grpo", "gigpo", "g2po"}
    assert len({tuple(a["eval_episodes"]) for a in arms}) == 1  # equal samples
    assert exp.plots(rec.data, tmp_path)[0].name == "g7_learning_curves.png"
