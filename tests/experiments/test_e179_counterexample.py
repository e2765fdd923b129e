from __future__ import annotations

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.e179_counterexample import exact_p_a, verify_lengths
from agentmill.experiments.protocol import RunContext


def test_scheduler_decisions_on_app_a():
    assert verify_lengths("retrospective") == {0: 2, 1: 0}
    assert verify_lengths("dspark") == {0: 0, 1: 0}
    a = verify_lengths("dspark-async")
    assert a[0] == a[1]                      # capacity cannot depend on x_1


def test_any_length_rule_independent_of_x1_is_exact_and_a_dependent_one_is_not():
    for k in (0, 1, 2):
        assert abs(exact_p_a({0: k, 1: k}) - 0.7) < 1e-15
    assert abs(exact_p_a({0: 1, 1: 0}) - 0.85) < 1e-15


def test_smoke(tmp_path):
    exp = get("e179.counterexample")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["nc1_retro_error"].value > 0.1 and m["t3_mc_max_dev"].value < 0.05
    assert exp.plots(ctx.data, tmp_path)
