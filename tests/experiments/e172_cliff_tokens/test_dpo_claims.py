"""CT-7 / CT-8 (Cliff-DPO vs full DPO on the tiny chained-addition model): the statistics read from a hand-made
pipeline result, and judges that can fail."""

from __future__ import annotations

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.e172_cliff_tokens.dpo_data import DPOSetup, gain_rows, paired_estimate
from agentmill.experiments.e172_cliff_tokens.dpo_types import so_reduction


def _blob(base, after_cliff, after_full, base_so=None, so_after=None):
    runs = [{"arm": "UC+SO", "seed": s, "trained": True, "correct": c} for s, c in enumerate(after_cliff)]
    runs += [{"arm": "full", "seed": s, "trained": True, "correct": c} for s, c in enumerate(after_full)]
    if so_after is not None:
        runs += [{"arm": "SO", "seed": 0, "trained": True, "correct": base, "so": so_after}]
    return {"heldout": {"base_correct": base, "base_so": base_so}, "runs": runs}


def test_gain_rows_average_seeds_per_problem():
    blob = _blob([0, 0, 1, 1], [[1, 0, 1, 1], [1, 1, 1, 1]], [[0, 0, 1, 0]])
    assert gain_rows(blob, "UC+SO").tolist() == [1.0, 0.5, 0.0, 0.0]
    assert gain_rows(blob, "full").tolist() == [0.0, 0.0, 0.0, -1.0]
    assert gain_rows(blob, "DF") is None


def test_gain_ratio_and_difference_by_hand():
    rng = np.random.default_rng(0)
    base = (rng.random(400) < 0.5).astype(int)
    fixed_c = np.where(rng.random(400) < 0.3, 1, base)       # Cliff-DPO fixes ~30 % of problems
    fixed_f = np.where(rng.random(400) < 0.3, 1, base)
    blob = _blob(base.tolist(), [fixed_c.tolist()], [fixed_f.tolist()])
    gc, gf = gain_rows(blob, "UC+SO"), gain_rows(blob, "full")
    r = paired_estimate(gc, gf, "ratio")
    assert r.value == gc.mean() / gf.mean() and r.lo < r.value < r.hi
    d = paired_estimate(gc, gf, "diff", level=0.9)
    assert d.value == gc.mean() - gf.mean() and d.level == 0.9


def test_so_reduction_by_hand():
    # two problems: before 2 errors of 10 sites; after 1 of 10 → 1 − 0.1 / 0.2 = 0.5
    blob = _blob([0, 0], [[0, 0]], [[0, 0]], base_so=[[5, 1], [5, 1]], so_after=[[5, 1], [5, 0]])
    est = so_reduction(blob, 200)
    assert abs(est.value - 0.5) < 1e-12


def test_setup_keys_differ_and_are_stable():
    assert DPOSetup().key() == DPOSetup().key()
    assert DPOSetup().key() != DPOSetup(failing_traces=99).key()


def test_ct7_ct8_judges_can_fail():
    ct7 = get("e172.cliff_dpo_compute")
    bad = {"ct7_gain_ratio": Estimate(0.2, 0.1, 0.3, n=500, method="x"),
           "ct7_gain_diff": Estimate(-0.1, -0.15, -0.05, n=500, level=0.9, method="x"),
           "ct7_position_ratio": Estimate.exact(0.5), "ct7_train_wall_ratio": Estimate(0.9, 0.8, 1.0, n=3, method="x"),
           "ct7_total_compute_ratio": Estimate.exact(2.0)}
    assert set(ct7.judge("full", bad).values()) == {"not_supported"}
    good = {"ct7_gain_ratio": Estimate(0.9, 0.6, 1.2, n=500, method="x"),
            "ct7_gain_diff": Estimate(0.0, -0.01, 0.01, n=500, level=0.9, method="x"),
            "ct7_position_ratio": Estimate.exact(0.05), "ct7_train_wall_ratio": Estimate(0.3, 0.2, 0.4, n=3, method="x"),
            "ct7_total_compute_ratio": Estimate.exact(20.0)}
    assert set(ct7.judge("full", good).values()) == {"supported"}
    assert set(ct7.judge("quick", good).values()) == {"supported"}  # quick_check renames metrics in for_profile only
    ct8 = get("e172.cliff_dpo_types")
    v = ct8.judge("full", {"ct8_gain_ucso": Estimate(0.02, -0.01, 0.05, n=500, method="x"),
                           "ct8_gain_df": Estimate(0.1, 0.05, 0.15, n=500, level=0.9, method="x"),
                           "ct8_so_error_reduction": Estimate(0.1, 0.0, 0.2, n=500, method="x")})
    assert set(v.values()) == {"not_supported"}
    data: dict = {}
    from agentmill.experiments.protocol import withhold

    withhold(data, ["ct8_gain_df"], "no DF cliffs to train on")
    assert ct8.judge("full", {}, data)["E172-CT8-df"] == "not_judged"
