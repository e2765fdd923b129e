"""Every E178 experiment's smoke measure() and plots() run; the simulation helpers are checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path):
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("exp_id", ["e178.invariants", "e178.statistic", "e178.review", "e178.perf", "e178.lm_judge"])
def test_smoke_measure_and_plots(exp_id, tmp_path) -> None:
    exp = get(exp_id)
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m
    assert exp.plots(ctx.data, tmp_path)
    if exp_id == "e178.invariants":
        assert m["rq1_checks_passed"].value == 1.0 and ctx.data["archive_of_13"]


def test_statistic_simulation_marginals() -> None:
    from agentmill.experiments.e178_red_queen.statistic import simulate

    m, b, c = simulate(300, 0.10, 4, 4000, np.random.default_rng(0))
    assert abs(m.mean() / 300 - 0.8) < 0.005
    assert abs((b + c).mean() / 300 - 0.10) < 0.005 and abs(b.mean() - c.mean()) < 0.5
    m, b, c = simulate(200, 0.12, 1, 4000, np.random.default_rng(1), gain=0.10)
    assert abs((m[:, None] - c + b).mean() / 200 - 0.9) < 0.005


def test_sign_test_by_hand() -> None:
    from agentmill.experiments.e178_red_queen.review import _sign_test_p

    assert _sign_test_p(np.array([0.1] * 10)) == pytest.approx(1 / 1024)
    assert _sign_test_p(np.array([0.1, -0.1])) == pytest.approx(0.75)
