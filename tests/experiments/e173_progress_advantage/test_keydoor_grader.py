"""E173 P-4/P-5 (tabular KeyDoor grader, fluency control): smoke profiles through the CLI's runner, and the pieces
they rest on checked by hand."""

from __future__ import annotations

import numpy as np

from agentmill.envs.keydoor import layouts
from agentmill.experiments import get
from agentmill.experiments.e173_progress_advantage.fluency_keydoor import (TRAP_WORLD, Sim, build_task,
                                                                           fluency_reference, rollouts)
from agentmill.experiments.e173_progress_advantage.keydoor_grader import SETUPS
from agentmill.experiments.runner import run_experiment


def test_keydoor_grader_smoke(tmp_path) -> None:
    exp = get("e173.progress_keydoor_grader")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    # π_θ ≡ π_ref: every score exactly 0, AUROC exactly 0.5, and the real scorer warns
    assert m["k0_max_abs_progress_observed"].value == 0.0
    assert m["K0_step_auroc_progress"].value == 0.5
    assert m["k0_scorer_warned_observed"].value == 1.0
    assert m["K10_step_auroc_oracle"].value > 0.9  # the exact A* separates progress from error steps
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_fluency_control_smoke(tmp_path) -> None:
    exp = get("e173.progress_fluency_control")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and rec.verdicts == {"P-5": "not_judged"}
    assert abs(rec.metrics["mean_ref_plan_mass"].value - 0.02) < 1e-6  # the bisection hits P-5's p ≈ 0.02 [R]
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_fluency_reference_by_hand() -> None:
    valid = np.array([[True, True, False], [True, True, True]])
    ref = fluency_reference(valid, np.array([True, False, False]), np.log(3.0))
    np.testing.assert_allclose(ref, [[0.75, 0.25, 0.0], [0.6, 0.2, 0.2]])


def test_simulated_rollouts_match_the_exact_success_probability() -> None:
    """Rollouts on the exact model: the success rate of the reference within 30 steps agrees with the exact
    finite-horizon absorption probability (4-SE check)."""
    task = build_task(layouts(1, seed=0, config=TRAP_WORLD)[0], SETUPS["smoke"])
    mdp, pi = task.mdp, task.pi_ref
    P_pi = np.einsum("sa,sat->st", pi, mdp.P)
    won = np.flatnonzero(mdp.absorbing)
    P_pi[won, won] = 1.0  # the won state keeps its mass
    p = np.zeros(mdp.n_states)
    p[0] = 1.0
    for _ in range(TRAP_WORLD.max_steps):
        p = p @ P_pi
    exact = p[mdp.absorbing].sum()
    ep = rollouts(task, Sim(mdp, pi), 4000, TRAP_WORLD.max_steps, np.random.default_rng(3))
    se = np.sqrt(max(exact * (1 - exact), 1e-4) / 4000)
    assert abs(ep.success.mean() - exact) < 4 * se
    assert np.all(ep.length <= TRAP_WORLD.max_steps)
