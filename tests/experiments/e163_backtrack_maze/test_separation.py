from __future__ import annotations

import math

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.e163_backtrack_maze.maze_configs import parse_configs
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile="smoke"):
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_smoke_measure_and_plots(tmp_path) -> None:
    exp = get("e163.maze_separation")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["r5a_sft_grad_bwd_max"].value == 0.0 and m["r5a_power_rl_grad_bwd_min"].value > 0
    assert m["nc7_grad_max"].value == 0.0 and m["nc7_T_drift"].value == 0.0
    assert m["r5h_max_z"].value < 4 and m["r5c_ratio_max"].value < 1.1
    assert {c.metric for c in exp.claims} <= set(m)
    assert all(v == "not_judged" for v in exp.judge("smoke", m).values())
    paths = exp.plots(ctx.data, tmp_path)
    assert len(paths) == 2 and all(p.stat().st_size > 5000 for p in paths)


def test_law_away_from_defaults_via_set(tmp_path) -> None:
    """--set W/K/L: at W=3, L=1 the SFT exponent base is L+1 = 2 and RLVR stays linear."""
    exp = get("e163.maze_separation")
    setup = exp.setup_for("smoke", {"W": "3", "K": "4,5,6,7", "L": "1", "W_fit": "2,5"})
    assert (setup.W, setup.K, setup.L) == ((3,), (4, 5, 6, 7), (1,))
    m = exp.measure(setup, _ctx(tmp_path))
    assert m["r5b_slope_rel_err"].value < 0.05 and m["r5b_r2_W_min"].value > 0.999
    assert 0.9 <= m["r5c_slope"].lo <= m["r5c_slope"].hi <= 1.1


def test_judge_rejects_a_slow_rl(tmp_path) -> None:
    """Power: with too few exact-flow steps RLVR is far from T*, and R5c says not_supported."""
    exp = get("e163.maze_separation")
    setup = exp.setup_for("smoke", {"rl_steps": "5"})
    m = exp.measure(setup, _ctx(tmp_path))
    claim = next(c for c in exp.claims if c.id == "E163-R5c")
    assert claim.judge(m["r5c_ratio_max"]) == "not_supported"


def test_bad_settings() -> None:
    exp = get("e163.maze_separation")
    with pytest.raises(ValueError, match="W,K,L"):
        parse_configs("4,5")
    with pytest.raises(ValueError, match="W must be"):
        parse_configs("1,5,2")
    with pytest.raises(ValueError, match=">= 2"):
        exp.measure(exp.setup_for("smoke", {"K": "1,2"}), _ctx(None))
    assert not math.isnan(parse_configs("4,5,2;4,6,2")[1][1])
