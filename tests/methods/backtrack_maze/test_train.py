from __future__ import annotations

import numpy as np
import pytest

import agentmill.methods.backtrack_maze.train as train_mod
from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.methods.backtrack_maze import (TabularPolicy, ce_grad, collect_traces, distill, expected_hitting_time,
                                              fit_student, optimal_time, sft_converged_time, train_rlvr_exact,
                                              train_rlvr_reinforce, train_sft)


def test_ce_grad_by_hand() -> None:
    """Uniform policy, L=1: one count of 'forward' at (1, fwd) -> gradient (½ - 1, ½ - 0) = (-½, ½)."""
    p = TabularPolicy(2, 2, 1)
    hub = np.array([1.0, 0.0])
    arm = np.zeros((1, 2, 2))
    arm[0, 0, 0] = 1.0
    loss, g_hub, g_arm = ce_grad(p, hub, arm, 1.0)
    assert loss == pytest.approx(2 * np.log(2))
    assert np.allclose(g_hub, [-0.5, 0.5]) and np.allclose(g_arm[0, 0], [-0.5, 0.5])
    assert np.all(g_arm[0, 1] == 0.0)


@pytest.mark.parametrize("mode", ["exact", "sampled"])
def test_sft_moves_forward_logits_never_backward_ones(mode) -> None:
    env = PathStarMultigraph(4, 5, 2)
    p = TabularPolicy(4, 5, 2)
    log = train_sft(p, env, mode=mode, steps=300 if mode == "exact" else 600, seed=3)
    assert log.grad_bwd_max == 0.0 and log.grad_max > 0
    assert np.all(p.theta[:, 1, :] == 0.0)            # backward-facing logits untouched, bit for bit
    assert np.abs(p.theta[:, 0, :]).max() > 1.0       # forward-facing logits moved
    assert p.p_back()[:, 0].max() < 2e-3 and np.allclose(p.p_back()[:, 1], 1 / 3)
    assert log.loss[-1] < log.loss[0]


def test_sft_converges_to_the_closed_form() -> None:
    env = PathStarMultigraph(4, 5, 2)
    p = TabularPolicy(4, 5, 2)
    train_sft(p, env)
    assert expected_hitting_time(p) == pytest.approx(sft_converged_time(4, 5, 2), rel=1e-3)


def test_sft_assertion_fires_on_backward_supervision(monkeypatch) -> None:
    """The zero-gradient check has power: golden data that (wrongly) contained a bwd state trips it."""
    real = train_mod.golden_counts

    def leaky(env, mode, rng, batch):
        hub, arm, n = real(env, mode, rng, batch)
        arm = arm.copy()
        arm[0, 1, env.L] = 0.01
        return hub, arm, n

    monkeypatch.setattr(train_mod, "golden_counts", leaky)
    with pytest.raises(AssertionError, match="backward-facing"):
        train_sft(TabularPolicy(2, 3, 1), PathStarMultigraph(2, 3, 1), steps=5)


def test_sft_bad_mode_and_mismatched_env() -> None:
    with pytest.raises(ValueError, match="mode"):
        train_sft(TabularPolicy(2, 2, 1), PathStarMultigraph(2, 2, 1), mode="nope")
    with pytest.raises(ValueError, match="env is"):
        train_sft(TabularPolicy(2, 2, 1), PathStarMultigraph(2, 3, 1))


def test_rlvr_exact_reaches_the_optimum() -> None:
    env = PathStarMultigraph(4, 5, 2)
    p = TabularPolicy(4, 5, 2)
    log = train_rlvr_exact(p, env)
    T = expected_hitting_time(p)
    assert T / optimal_time(4, 5) <= 1.05
    assert log.T[-1][1] == T and log.loss[-1] < log.loss[0]
    s = p.summary()
    assert s["p_back_fwd"] < 0.01 and s["p_back_bwd"] > 0.99


def test_rlvr_outcome_only_has_no_gradient_nc7() -> None:
    env = PathStarMultigraph(4, 4, 2)
    p = TabularPolicy(4, 4, 2)
    T0 = expected_hitting_time(p)
    log = train_rlvr_exact(p, env, steps=50, objective="outcome")
    assert log.grad_max == 0.0 and expected_hitting_time(p) == T0 and np.all(p.get_flat() == 0.0)


def test_reinforce_learns_to_backtrack() -> None:
    env = PathStarMultigraph(3, 3, 2)
    p = TabularPolicy(3, 3, 2)
    T0 = expected_hitting_time(p)
    log = train_rlvr_reinforce(p, env, episodes=3200, seed=0)
    T = expected_hitting_time(p)
    assert log.steps == 3200 and log.grad_bwd_max > 0   # RL does train backward-facing states
    assert T < 0.5 * T0 and T / optimal_time(3, 3) < 1.5
    assert p.summary()["p_back_bwd"] > 0.6
    with pytest.raises(ValueError, match="batch"):
        train_rlvr_reinforce(p, env, batch=1)


def test_distillation_copies_the_teacher_and_stripping_drops_backtracking() -> None:
    env = PathStarMultigraph(4, 4, 2)
    teacher = TabularPolicy(4, 4, 2, init="optimal")
    teacher.theta[:, 0, 2] = -3.0   # an imperfect teacher: sometimes backs off a forward-facing state
    tr = collect_traces(teacher, env, 500, seed=1)
    assert tr.n == 500 and tr.arm_counts[:, 1, :].sum() > 0
    assert np.all(tr.seg_arm_counts <= tr.arm_counts) and tr.seg_hub_counts.sum() == 500
    student = distill(teacher, env, traces=tr, steps=500)
    assert expected_hitting_time(student) / expected_hitting_time(teacher) < 1.2
    stripped = distill(teacher, env, traces=tr, strip_recoveries=True, steps=500)
    # Last segments hold no back move out of a dead end, so P(back | bwd) is not learned.
    assert stripped.summary()["p_back_bwd"] < 0.5 < student.summary()["p_back_bwd"]
    assert expected_hitting_time(stripped) > 5 * expected_hitting_time(student)


def test_fit_student_on_unseen_states_keeps_them_uniform() -> None:
    env = PathStarMultigraph(2, 3, 1)
    hub = np.array([3.0, 3.0])
    arm = np.zeros((2, 2, 2))
    arm[:, 0, 0] = 6.0
    student, log = fit_student(env, hub, arm, 6, steps=100)
    assert np.all(student.theta[:, 1, :] == 0.0) and log.grad_bwd_max == 0.0
