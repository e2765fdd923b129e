"""E173 P-6a: the smoke profile through the CLI's runner (tiny pair, no verdict); the pair starts at π_ref."""

from __future__ import annotations

import numpy as np

from agentmill.envs.keydoor import TINY_WORLD
from agentmill.experiments import get
from agentmill.experiments.e173_progress_advantage.lm_pair_distilled import world
from agentmill.experiments.runner import record_path, run_experiment
from agentmill.lm.candidate_pair import build_pair


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


def test_a_fresh_tiny_pair_is_its_own_reference_and_bad_specs_raise() -> None:
    import pytest
    import torch

    from agentmill.envs.keydoor import layouts

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pair = build_pair("tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=3", temperature=20.0, one_shot=False,
                          lr=1e-3)
        _, mdp, states = world(layouts(1, seed=0, calibrate=None, config=TINY_WORLD)[0])
        obs, info = states[0]
        assert np.allclose(pair.policy.log_probs(obs, info), pair.reference.log_probs(obs, info), atol=1e-5)
    finally:
        torch.set_num_threads(n)
    assert len(info["admissible_commands"]) <= 8  # spec §7 P-6: ≤ 8 candidates
    with pytest.raises(ValueError, match="hf:NAME"):
        build_pair("scripted:x", temperature=1.0, one_shot=False, lr=1e-3)
