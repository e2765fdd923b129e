"""E165 G-1 (value variance): the smoke profile through the CLI's runner; exact values are exact."""

from __future__ import annotations

import numpy as np

from agentmill.envs.keydoor import layouts
from agentmill.experiments import get
from agentmill.experiments.e165_g2po.keydoor_groups import OBSERVABLE
from agentmill.experiments.e165_g2po.value_variance import SETUPS, exact_values
from agentmill.experiments.runner import run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e165.g2po_value_variance")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and rec.verdicts == {"G-1": "not_judged"}
    m = rec.metrics
    assert m["nodes_compared"].value > 0 and m["truncated_share"].value < 0.05
    assert 0 < m["mse_ratio_node_over_mc"].value < 1
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_exact_values_satisfy_the_bellman_equation_at_the_start() -> None:
    """V(start) from the linear solve agrees with the Monte Carlo mean return of the same policy (4-SE check)."""
    from agentmill.envs.rollout import EpsilonOraclePolicy, collect_groups
    from agentmill.experiments.e165_g2po.keydoor_groups import KEY, KeyDoorFactory
    from agentmill.methods.g2po.returns import discounted_returns

    s = SETUPS["smoke"]
    lay = layouts(1, seed=0, calibrate=None, config=OBSERVABLE)[0]
    v = exact_values(lay, s)
    tb, _, _ = collect_groups(KeyDoorFactory(OBSERVABLE), EpsilonOraclePolicy(0.5), [lay], 400, seed=7)
    g0 = discounted_returns(tb, s.gamma)[tb.traj_starts]
    start = v[KEY(tb.obs[0], tb.info[0])]
    assert abs(g0.mean() - start) < 4 * g0.std(ddof=1) / np.sqrt(g0.size)
