"""E165 G-4 (no-repeat collapse): the smoke profile through the CLI's runner; the issue's negative control."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import run_experiment


def test_smoke_record_shape_and_exact_collapse(tmp_path) -> None:
    exp = get("e165.g2po_no_repeat_collapse")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    assert m["unique_start_max_diff"].value < 1e-12          # no repeats: G2PO-style == GRPO
    assert m["shared_start_max_diff_t_ge_1"].value < 1e-12   # shared start: only t = 0 differs ...
    assert m["shared_start_max_diff_t0"].value > 1e-3        # ... and it does differ there (P1)
    assert m["merge_rate_p=1"].value == 0 and m["merge_rate_p=0"].value > 0.5
    assert m["scrubbed_gain_abs_diff"].value < 1e-12         # the scrubber undoes the wrapper exactly
    assert -1 <= m["spearman_gain_vs_repeat"].value <= 1
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000
