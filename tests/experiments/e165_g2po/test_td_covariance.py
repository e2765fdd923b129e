"""E165 G-2 (TD covariance): the smoke profile through the CLI's runner."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_td_covariance")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and rec.verdicts == {"G-2": "not_judged"}
    m = rec.metrics
    assert m["edges_judged"].value > 5
    assert 0 <= m["share_edges_pass"].lo <= m["share_edges_pass"].value <= m["share_edges_pass"].hi <= 1
    assert m["self_loops_judged"].value > 0  # reported apart, never counted in the judged share
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000
