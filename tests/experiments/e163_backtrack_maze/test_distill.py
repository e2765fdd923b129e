from __future__ import annotations

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path):
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_smoke_measure_and_plots(tmp_path) -> None:
    exp = get("e163.maze_distill")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert {c.metric for c in exp.claims} <= set(m)
    row = ctx.data["rows"][0]
    assert row["T_distill"] > 0 and row["T_distill_stripped"] > row["T_distill"]
    assert m["distill_grad_bwd_max"].value > 0   # whole traces do supervise backward-facing states
    paths = exp.plots(ctx.data, tmp_path)
    assert len(paths) == 1 and paths[0].stat().st_size > 5000


def test_set_configs(tmp_path) -> None:
    exp = get("e163.maze_distill")
    setup = exp.setup_for("smoke", {"configs": "3,3,1;2,2,2"})
    ctx = _ctx(tmp_path)
    m = exp.measure(setup, ctx)
    assert {(r["W"], r["K"], r["L"]) for r in ctx.data["rows"]} == {(3, 3, 1), (2, 2, 2)}
    assert m["r5f_ratio"].n == setup.seeds == 1  # the units behind the interval are seeds, not configs (issue 24)
