"""E165 G-3 (advantage quality): the smoke profile through the CLI's runner, the weighted AUROC, the controls."""

from __future__ import annotations

import numpy as np

from agentmill.core.stats import auroc
from agentmill.envs.keydoor import KeyDoorConfig
from agentmill.experiments import get
from agentmill.experiments.e165_g2po.advantage_quality import SETUPS
from agentmill.experiments.e165_g2po.advantage_scoring import estimator_advantages, shuffled_key_table, weighted_auroc
from agentmill.experiments.e165_g2po.keydoor_groups import KEY, KeyDoorFactory, keydoor_rollouts, keydoor_tasks
from agentmill.experiments.runner import record_path, run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_advantage_quality")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and record_path(tmp_path, "smoke", exp.id).exists()
    assert set(rec.verdicts) == {c.id for c in exp.claims} and set(rec.verdicts.values()) == {"not_judged"}
    for k in ("kd_gain_g2po_grpo", "kd_gain_g2po_gigpo", "kd_infail_share_g2po", "kd_shuffled_gain_g2po_grpo",
              "kd_perm_auroc_g2po", "slip_auroc_g2po", "kd_merge_rate"):
        assert k in rec.metrics, k
    m = rec.metrics
    assert m["kd_auroc_g2po"].lo <= m["kd_auroc_g2po"].value <= m["kd_auroc_g2po"].hi
    assert m["kd_infail_share_grpo"].value == 0  # GRPO: every step of a failed run is negative by construction
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_weighted_auroc_equals_auroc_and_duplicating_rows_is_weighting() -> None:
    rng = np.random.default_rng(3)
    s, y = rng.integers(0, 6, 80).astype(float), rng.random(80) < 0.3
    assert abs(weighted_auroc(s, y, np.ones(80)) - auroc(s, y)) < 1e-15
    w = rng.integers(0, 3, 80).astype(float)
    rows = np.repeat(np.arange(80), w.astype(int))
    assert abs(weighted_auroc(s, y, w) - auroc(s[rows], y[rows])) < 1e-12


def test_shuffled_keys_keep_node_sizes_and_the_grpo_term() -> None:
    tasks = keydoor_tasks(SETUPS["smoke"])
    tb, _ = keydoor_rollouts(tasks, 4, 8, 0.85, 5, KeyDoorFactory(KeyDoorConfig()))
    sh = shuffled_key_table(tb, KEY, np.random.default_rng(0))
    for g in np.unique(tb.group_id):
        rows = tb.group_id == g
        a = np.unique([repr(KEY(o, i)) for o, i in zip(tb.obs[rows], tb.info[rows])], return_counts=True)[1]
        b = np.unique(sh.obs[rows].astype(str), return_counts=True)[1]
        assert sorted(a) == sorted(b)
    adv, _ = estimator_advantages(tb, KEY)
    from agentmill.methods.g2po.keys import ExactKey
    sadv, _ = estimator_advantages(sh, ExactKey(normalize_ws=False))
    assert np.array_equal(adv["grpo"], sadv["grpo"]) and not np.allclose(adv["g2po"], sadv["g2po"])
