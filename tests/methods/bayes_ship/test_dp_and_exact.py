"""The DP controller against brute force, its two solvers against each other, and D6 under exact evaluation."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from agentmill.methods.bayes_ship import BayesShipConfig, ControlState, DPController, GreedyController
from agentmill.methods.bayes_ship.baselines import all_pipelines, paper_baselines
from agentmill.methods.bayes_ship.core import bayes_update
from agentmill.methods.bayes_ship.synthetic import (MEASURED_KERNEL, WORLD_B, WORLD_C, SyntheticWorld, exact_blind,
                                                    exact_evaluate, oracle_auroc, sample_trajectories)

warnings.simplefilter("ignore", UserWarning)
SMALL = SyntheticWorld("small", 0.25, {"A": (0.85, 0.2), "B": (0.7, 0.4)}, {"A": 2.0, "B": 1.0}, 5.0, 3)


def _expectimax(world: SyntheticWorld, cost) -> float:
    """Exact optimal value without a grid (candidate-staged, critics once per candidate, IID kernel)."""
    names = list(world.critics)

    @functools.lru_cache(maxsize=None)
    def W(j: int, mask: frozenset, b: float) -> float:
        best = max(cost.R * b - cost.c_ver, 0.0)
        if j < world.max_candidates:
            best = max(best, -cost.c_gen + W(j + 1, frozenset(), world.prior))
        for k in names:
            if k in mask:
                continue
            p1, p0 = world.critics[k]
            pp = p1 * b + p0 * (1 - b)
            v = (-cost.critic_costs[k] + pp * W(j, mask | {k}, bayes_update(b, p1, p0, True))
                 + (1 - pp) * W(j, mask | {k}, bayes_update(b, p1, p0, False)))
            best = max(best, v)
        return best

    return W(1, frozenset(), world.prior) - cost.c_gen


@pytest.mark.parametrize("c_ver", [8.0, 25.0, 45.0])
def test_dp_matches_brute_force_expectimax(c_ver: float) -> None:
    cost = SMALL.cost(c_ver)
    exact = _expectimax(SMALL, cost)
    dp = DPController(SMALL.calibration(), cost, BayesShipConfig(controller="dp", grid=20000, interp="linear",
                                                                  max_candidates=3))
    assert dp.value(ControlState(SMALL.prior, max_candidates=3)) - cost.c_gen == pytest.approx(exact, abs=2e-3)
    # the policy the DP acts on, evaluated exactly, attains the optimum up to the grid error
    assert exact_evaluate(dp, SMALL, cost).utility == pytest.approx(exact, abs=2e-3)


def test_vectorised_and_reference_solvers_agree() -> None:
    for stages in ("candidates", "steps"):
        cfg = BayesShipConfig(controller="dp", grid=60, stages=stages, horizon_steps=4)
        dp = DPController(WORLD_B.calibration(), WORLD_B.cost(20.0), cfg)
        a, b = dp.solve_vectorised(), dp.solve_reference()
        assert (a["policy"] == b["policy"]).all()
        assert np.abs(a["W"] - b["W"]).max() < 1e-9


@pytest.mark.parametrize("world", [WORLD_B, WORLD_C.with_kernel(MEASURED_KERNEL, "+k")])
def test_d6_dp_at_least_every_policy_under_the_true_model(world) -> None:
    names = list(world.critics)
    for th in (0.05, 0.2, 0.45):
        cost = world.cost(100 * th)
        dp = exact_evaluate(DPController(world.calibration(), cost), world, cost).utility
        others = [GreedyController(world.calibration(), cost)] + paper_baselines(names) + all_pipelines(names)
        bound = 100 * 5 * (len(names) + 1) / 1000
        for p in others:
            assert dp >= exact_evaluate(p, world, cost).utility - bound, p.name


@pytest.mark.slow  # ~3 s: Monte Carlo over 4,000 instances
def test_blind_evaluator_agrees_with_the_tree_and_with_monte_carlo() -> None:
    from agentmill.methods.bayes_ship.replay import utilities

    w = WORLD_C.with_kernel(MEASURED_KERNEL, "+k")
    cost = w.cost(20.0)
    trajs = sample_trajectories(w, 4000, 3)
    for p in paper_baselines(list(w.critics)):
        fast = exact_blind(p, w, cost).utility
        u = utilities(trajs, p, cost)
        # the Monte Carlo mean is within 4 standard errors of the exact value (tightens with samples)
        assert abs(u.mean() - fast) < 4 * u.std() / np.sqrt(u.size) + 1e-9, p.name
    g = GreedyController(w.calibration(), cost)
    u = utilities(trajs, g, cost)
    assert abs(u.mean() - exact_evaluate(g, w, cost).utility) < 4 * u.std() / np.sqrt(u.size)


def test_oracle_auroc_is_a_probability_and_matches_sampling() -> None:
    from agentmill.core.stats import auroc
    from agentmill.methods.bayes_ship.uq import full_evidence_belief

    a = oracle_auroc(WORLD_C)
    recs = [r for t in sample_trajectories(WORLD_C, 3000, 1) for r in t]
    s = [full_evidence_belief(r, WORLD_C.calibration()) for r in recs]
    assert 0.5 < a < 1
    assert auroc(s, [r.y for r in recs]) == pytest.approx(a, abs=0.02)


def test_non_terminal_verify_is_worth_at_least_terminal() -> None:
    cost = WORLD_C.cost(20.0)
    cal = WORLD_C.calibration()
    t = DPController(cal, cost, BayesShipConfig(controller="dp", grid=400))
    n = DPController(cal, cost, BayesShipConfig(controller="dp", grid=400, verify_terminal=False))
    s = ControlState(0.2)
    assert n.value(s) >= t.value(s) - 1e-9
    assert exact_evaluate(n, WORLD_C, cost, verify_terminal=False).utility >= \
        exact_evaluate(t, WORLD_C, cost).utility - 0.5


def test_exact_evaluation_of_a_critic_loop_terminates() -> None:
    from agentmill.methods.bayes_ship import Decision

    class Loop:
        name = "loop"

        def decide(self, s: ControlState) -> Decision:
            return Decision("critic", "A", {}, s.belief)

    cost = SMALL.cost(20.0)
    ev = exact_evaluate(Loop(), SMALL, cost)
    assert ev.critic_calls["A"] == 65  # steps 0..64, then the cap ends the episode
    assert ev.utility == pytest.approx(-cost.c_gen - 65 * cost.critic_costs["A"])
