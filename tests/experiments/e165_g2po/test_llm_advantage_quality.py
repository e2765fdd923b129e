"""E165 G-8/G-9 LM row: the smoke profile through the CLI's runner (tiny CandidatePolicy, no verdict)."""

from __future__ import annotations

import math

from agentmill.experiments import get
from agentmill.experiments.runner import record_path, run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_llm_advantage_quality")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and record_path(tmp_path, "smoke", exp.id).exists()
    assert set(rec.verdicts) == {c.id for c in exp.claims} and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    for k in ("lm_gain_g2po_gigpo_observed", "lm_gain_g2po_grpo_observed", "uniq_gain_g2po_grpo_observed",
              "lm_overhead_ratio_observed", "lm_perm_auroc_g2po", "lm_shuffled_gain_g2po_grpo", "lm_merge_rate"):
        assert k in m, k
    s = exp.setups["smoke"]
    assert m["lm_decisions"].value == m["uniq_decisions"].value <= s.n_layouts * s.group_size * s.max_steps
    assert 0 < m["lm_overhead_ratio_observed"].value < 1 and m["lm_rollout_seconds"].value > 0
    ratio = m["lm_overhead_ratio_observed"]  # one ratio per group, judged on their t-interval (never one timing)
    assert ratio.n == s.n_layouts and ratio.lo < ratio.value < ratio.hi
    assert 0 < m["lm_overhead_ratio_pooled"].value < 1
    assert m["uniq_merge_rate"].value == 0  # UniqueObs p = 1: no observation repeats, so nothing merges
    assert m["uniq_gain_g2po_grpo_observed"].value == 0 or math.isnan(m["uniq_gain_g2po_grpo_observed"].value)
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_claims_are_pre_registered_from_the_spec() -> None:
    claims = {c.id: c for c in get("e165.g2po_llm_advantage_quality").claims}
    assert (claims["G-8a"].threshold, claims["G-8b"].threshold) == (0.05, 0.10)
    assert (claims["G-8c"].threshold, claims["G-8c"].upper) == (-0.02, 0.02)
    assert claims["G-9-LM"].threshold == 0.005 and claims["G-9-LM"].direction == "<="
    assert get("e165.g2po_llm_advantage_quality").setups["full"].model == "hf:smollm2"
