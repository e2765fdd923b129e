from __future__ import annotations

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.e179_dspark.counterexample import exact_p_a, verify_lengths
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


def test_lossless_exact_smoke_and_its_negative_controls(tmp_path):
    exp = get("e179.lossless_exact")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["t1_max_error"].value < 1e-12
    assert m["nc3_anticipating_error"].value > 1e-3 and m["nc1b_retro_error"].value > 1e-3
    assert m["nc4_s0_refused"].value == 1
    assert exp.plots(ctx.data, tmp_path)


def test_a_verification_mutant_is_caught():
    """Replacement drawn from p instead of the residual: the enumeration must show the bias."""
    import numpy as np

    from agentmill.methods.dspark import exact
    from agentmill.methods.dspark.policies import make_policy

    tgt = exact.ToyMarkovLM(V=4, temperature=1.0)
    dr = exact.ToyDrafter(V=4, gamma=2)
    good = exact.exact_output_distribution(tgt, dr, (1, 2), 3, exact.policy_lengths(make_policy("fixed:2")))
    assert exact.max_abs_error(good, tgt.joint((1, 2), 3), 3) < 1e-12
    orig = np.maximum
    try:
        exact.np.maximum = lambda a, b: a            # residual = p: the classic bug
        bad = exact.exact_output_distribution(tgt, dr, (1, 2), 3, exact.policy_lengths(make_policy("fixed:2")))
    finally:
        exact.np.maximum = orig
    assert exact.max_abs_error(bad, tgt.joint((1, 2), 3), 3) > 1e-3


def test_lossless_mc_smoke_detects_the_retrospective_search(tmp_path):
    exp = get("e179.lossless_mc")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["t2_min_holm_p"].value > 1e-4          # a causal policy passes even at 2k samples
    assert m["t2_retro_p"].value < 1e-3             # and the trap is visible already
    assert exp.plots(ctx.data, tmp_path)


def test_lossless_mc_draw_consumes_the_generator_as_choice_does():
    """``_draw`` replaces ``rng.choice(V, p=p)`` in the Monte Carlo loop: the same draws from the same stream."""
    import numpy as np

    from agentmill.experiments.e179_dspark.lossless_mc import _cdf, _draw

    ps = np.random.default_rng(1).dirichlet(np.ones(6), size=20)
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert [int(a.choice(6, p=ps[i % 20])) for i in range(2000)] == [_draw(b, _cdf(ps[i % 20])) for i in range(2000)]
