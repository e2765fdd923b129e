"""E173 P-6b: the smoke profile through the CLI's runner (tiny pair, KL-PG, held-out grading; no verdict)."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import record_path, run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e173.progress_lm_pair_rl")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and record_path(tmp_path, "smoke", exp.id).exists()
    assert set(rec.verdicts) == {c.id for c in exp.claims} and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    for k in ("step_auroc_progress_observed", "step_auroc_gain_logprob_observed", "success_auroc_progress_observed",
              "bon_gain_progress_observed", "step_auroc_drop_wrong_reference_observed", "step_auroc_logprob",
              "step_auroc_free_text", "n_steps_graded", "train_success_last"):
        assert k in m, k
    s = exp.setups["smoke"]
    graded = m["n_steps_graded"].value + m["n_steps_unknown_or_dead_end"].value
    assert 0 < graded <= s.n_test_layouts * s.group_size * s.max_steps
    assert len(rec.data["train"]["success"]) == s.iterations
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_claims_are_pre_registered_from_the_spec() -> None:
    exp = get("e173.progress_lm_pair_rl")
    th = {c.id: c.threshold for c in exp.claims}
    assert th == {"P-6b-step": 0.7, "P-6b-gain": 0.05, "P-6b-success": 0.7, "P-6b-bon": 0.05,
                  "P-6b-NC-wrong-ref": 0.1}
    full = exp.setups["full"]
    assert (full.model, full.beta, full.lr, full.n_test_layouts, full.group_size) == ("hf:smollm2", 0.05, 1e-4, 40, 8)
    assert full.iterations <= 15 and get("e173.progress_lm_pair_distilled").setups["full"].beta == 0.5


def test_paired_auroc_by_hand() -> None:
    import math

    import numpy as np

    from agentmill.experiments.e173_progress_advantage.lm_pair_rl import _paired_auroc

    err = np.array([True, False, True, False])
    good = np.array([-1.0, 1.0, -2.0, 2.0])  # errors score lowest: AUROC(−score → error) = 1
    flat = np.zeros(4)  # ties everywhere: 0.5
    clusters = np.array([0, 0, 1, 1])
    assert _paired_auroc(good, None, err, clusters, 50, 0).value == 1.0
    assert _paired_auroc(flat, None, err, clusters, 50, 0).value == 0.5
    gain = _paired_auroc(good, flat, err, clusters, 50, 0)
    assert gain.value == 0.5 and gain.lo == gain.hi == 0.5  # every resample keeps both classes in each cluster
    assert math.isnan(_paired_auroc(good, None, np.ones(4, bool), clusters, 50, 0).value)  # no progress steps


def test_a_run_killed_after_an_iteration_resumes_there_with_the_same_numbers(tmp_path, monkeypatch) -> None:
    """Two KL-PG iterations uninterrupted, against a run killed right after iteration 1's checkpoint and run again:
    the second run trains only iteration 2 and every metric and training curve comes out the same."""
    from dataclasses import replace

    import pytest

    from agentmill.experiments.e173_progress_advantage import lm_pair_rl as P
    from agentmill.experiments.protocol import RunContext

    s = replace(P.SETUPS["smoke"], iterations=2)

    def run(work):
        ctx = RunContext(profile="smoke", model="none", executor=None, work_dir=work)
        return P.measure(s, ctx), ctx.data

    whole, data = run(tmp_path / "whole")
    assert data["iterations_resumed"] == 0

    real = P.save_training

    def save_then_die(policy, path, done, log):
        real(policy, path, done, log)
        if done == 1:
            raise KeyboardInterrupt("killed after iteration 1")

    monkeypatch.setattr(P, "save_training", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed")
    monkeypatch.setattr(P, "save_training", real)
    again, data2 = run(tmp_path / "killed")
    assert data2["iterations_resumed"] == 1
    for k in ("success", "soft_return", "mean_kl"):
        assert data2["train"][k] == pytest.approx(data["train"][k], rel=1e-9, abs=1e-12), k
    for k, est in whole.items():
        if not k.startswith("seconds_"):
            assert again[k].value == pytest.approx(est.value, rel=1e-9, abs=1e-12, nan_ok=True), k
    # a finished checkpoint is read, not retrained; grading sizes are not part of its name
    _, data3 = run(tmp_path / "killed")
    assert data3["iterations_resumed"] == 2
    assert P.checkpoint_path(replace(s, n_test_layouts=9, n_boot=3), tmp_path) == P.checkpoint_path(s, tmp_path)
    assert P.checkpoint_path(replace(s, beta=0.1), tmp_path) != P.checkpoint_path(s, tmp_path)
