"""E173 P-1/P-2/P-3 (algebraic claims): smoke profiles through the CLI's runner; exact quantities are exact."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import run_experiment


def test_progress_exactness_smoke(tmp_path) -> None:
    exp = get("e173.progress_exactness")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    assert m["max_err_vi"].value < 1e-10 and m["max_err_spi"].value < 1e-10 and m["scorer_max_err"].value < 1e-10
    assert m["kl_pg_spearman_mean"].value < 0  # training lowers the error
    assert m["kl_pg_final_over_initial_err_median"].value < 1
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_progress_reward_vs_advantage_smoke(tmp_path) -> None:
    exp = get("e173.progress_reward_vs_advantage")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    assert m["max_rms_det"].value < 1e-10 < 1e-2 < m["min_rms_stoch"].value
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_progress_token_telescoping_smoke(tmp_path) -> None:
    exp = get("e173.progress_token_telescoping")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and rec.verdicts == {"P-3": "not_judged"}
    m = rec.metrics
    assert m["max_err_sum"].value < 1e-10
    assert m["max_err_last"].value > 1e-3 and m["max_err_min"].value > 1e-3  # heuristics are not exact
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000
