"""E173 P-6a: the smoke profile through the CLI's runner (tiny pair, no verdict). That a fresh pair starts at
π_ref is tested with the pair builder, tests/lm/test_candidate_pair.py."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import record_path, run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e173.progress_lm_pair_distilled")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and record_path(tmp_path, "smoke", exp.id).exists()
    assert rec.verdicts == {"P-6a": "not_judged"}
    m = rec.metrics
    for k in ("spearman_candidates_observed", "spearman_free_text", "spearman_wrong_reference",
              "spearman_policy_logprob", "final_mean_kl"):
        assert k in m, k
    assert -1 <= m["spearman_candidates_observed"].value <= 1
    assert m["final_mean_kl"].value < m["initial_mean_kl"].value  # one distillation epoch moved π_θ towards π*
    assert len(rec.data["points"]["A"]) == m["n_state_action_pairs"].value > 0
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000
