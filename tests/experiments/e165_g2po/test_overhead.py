"""E165 G-9 / PERF (overhead): the smoke profile through the CLI's runner; the reference loop is a reference."""

from __future__ import annotations

import numpy as np

from agentmill.experiments import get
from agentmill.experiments.e165_g2po.overhead import reference_gigpo, synthetic_table
from agentmill.experiments.runner import run_experiment
from agentmill.methods.g2po import gigpo_advantages
from agentmill.methods.g2po.keys import ExactKey


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_overhead")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    assert m["keydoor_steps_per_s"].value > 0 and m["gigpo_ref_max_abs_diff"].value < 1e-12
    assert {"g2po_ms_per_1k_max", "g2po_linearity", "gigpo_speedup_vs_loop", "keydoor_overhead_ratio"} <= set(m)
    assert "tw_overhead_ratio" not in m  # smoke skips TextWorld
    # every timing is judged over repetitions (issue 24): one value per repetition behind each interval
    assert all(m[k].n == 2 and m[k].method == "t_log_repeats" for k in ("keydoor_steps_per_s", "g2po_ms_per_1k_max",
                                                                         "g2po_linearity", "gigpo_speedup_vs_loop",
                                                                         "keydoor_overhead_ratio"))
    assert len(rec.data["perf2"]["ms_per_1k_per_rep"]) == 2 and len(rec.data["perf3"]["ref_s"]) == 2
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_reference_loop_matches_the_vectorised_gigpo_and_its_own_hand_case() -> None:
    tb = synthetic_table(3, seed=4, n=4, length=5, n_states=3)
    assert np.max(np.abs(reference_gigpo(tb, ExactKey()) - gigpo_advantages(tb, ExactKey()).advantages)) < 1e-12
    # one group, two one-step trajectories from the same state, returns 1 and 0: ep = ±0.5, step = ±0.5
    from agentmill.core.types import StepTable
    hand = StepTable.from_episodes([dict(group_id="g", traj_id="a", obs=["S", "W"], actions=["x"], rewards=[1.0]),
                                    dict(group_id="g", traj_id="b", obs=["S", "C"], actions=["y"], rewards=[0.0],
                                         success=False)])
    assert np.allclose(reference_gigpo(hand, ExactKey()), [1.0, -1.0])
