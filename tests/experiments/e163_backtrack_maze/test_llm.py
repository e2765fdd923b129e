from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def test_smoke_on_a_tiny_transformer(tmp_path) -> None:
    pytest.importorskip("torch")
    from agentmill.lm import load_lm

    lm = load_lm("tiny:new")
    exp = get("e163.maze_llm")
    ctx = RunContext(profile="smoke", model="tiny:new", executor=make_executor("serial"), work_dir=tmp_path,
                     lm_loader=lambda spec: lm)
    m = exp.measure(exp.setup_for("smoke", {"steps": "1"}), ctx)
    assert {c.metric for c in exp.claims} <= set(m)
    assert m["params_moved"].value > 0
    assert m["r5l_dp_back_bwd"].lo <= m["r5l_dp_back_bwd"].value <= m["r5l_dp_back_bwd"].hi
    paths = exp.plots(ctx.data, tmp_path)
    assert len(paths) == 1 and paths[0].stat().st_size > 5000
