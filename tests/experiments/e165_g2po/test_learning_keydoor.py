"""E165 G-5/G-6 (learning on KeyDoor): the smoke profile through the CLI's runner."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.e165_g2po.learning_keydoor import ConstantKey
from agentmill.experiments.runner import run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_learning_keydoor")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    # the smoke (like quick) profile records observations, never the claim metrics
    assert "auc_diff_g2po_grpo" not in m and "auc_diff_g2po_grpo_observed" in m
    assert {"unique_auc_diff_g2po_grpo_observed", "constkey_auc_diff_g2po_grpo_observed", "steps_auc_diff_g2po_grpo",
            "lr_g2po", "merge_rate", "g2po_overhead_ratio"} <= set(m)
    assert m["unique_merge_rate"].value == 0 and m["merge_rate"].value > 0.5
    logs = rec.data["logs"]
    assert {a["estimator"] for a in logs["main"]["arms"]} == {"grpo", "gigpo", "g2po"}
    # equal samples: every arm of a seed consumed the same number of episodes
    for seed in (0, 1):
        eps = {tuple(a["eval_episodes"]) for part in logs.values() for a in part["arms"] if a["seed"] == seed}
        assert len(eps) == 1
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_constant_key_is_one_node() -> None:
    assert ConstantKey()("a", {}) == ConstantKey()("b", {"description": "x"})
