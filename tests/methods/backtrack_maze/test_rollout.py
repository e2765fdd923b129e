from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.methods.backtrack_maze import TabularPolicy, mc_hitting_time, restart_time, run_episodes
from agentmill.methods.backtrack_maze.rollout import mc_steps


def test_optimal_policy_steps_are_K_plus_2K_per_wrong_try() -> None:
    env = PathStarMultigraph(3, 4, 2)
    ep = run_episodes(TabularPolicy(3, 4, 2, init="optimal"), env, 500, np.random.default_rng(0))
    assert ep.success.all()
    assert np.all((ep.steps - 4) % 8 == 0)   # T = K + 2K·(wrong tries)


def test_counts_are_consistent() -> None:
    env = PathStarMultigraph(3, 3, 2)
    ep = run_episodes(TabularPolicy(3, 3, 2), env, 300, np.random.default_rng(1), record=True, t_max=200)
    moves = ep.hub_counts.sum(1) + ep.arm_counts.sum((1, 2, 3))
    assert np.all(moves <= ep.steps) and np.all(ep.steps <= 200)
    assert np.all(ep.seg_hub_counts.sum(1) == 1)           # every segment starts with one hub departure
    assert np.all(ep.seg_arm_counts <= ep.arm_counts)
    assert not ep.success.all() or ep.steps.max() < 200


def test_restart_wrapper_formula_within_3se() -> None:
    env = PathStarMultigraph(4, 5, 2)
    pol = TabularPolicy(4, 5, 2, init="sft_converged")
    from agentmill.methods.backtrack_maze import RestartAfter

    for r in (0, 5, 10):
        steps = mc_steps(pol, env, 20_000, seed=r, wrapper=RestartAfter(5, r)).astype(float)
        se = steps.std(ddof=1) / np.sqrt(steps.size)
        assert abs(steps.mean() - restart_time(4, 5, r)) <= 3 * se


def test_restart_wrapper_validation() -> None:
    from agentmill.methods.backtrack_maze import RestartAfter

    with pytest.raises(ValueError, match="tau"):
        RestartAfter(0)
    with pytest.raises(ValueError, match="restart_cost"):
        RestartAfter(3, -1)


def test_mc_refuses_a_policy_that_never_arrives() -> None:
    pol = TabularPolicy(2, 3, 1)
    pol.theta[..., 0] = -1e4
    with pytest.raises(ValueError, match="infinite"):
        mc_hitting_time(pol, PathStarMultigraph(2, 3, 1), episodes=10)


def _play(monkeypatch: pytest.MonkeyPatch, below: int, **kw):
    from agentmill.methods.backtrack_maze import rollout

    monkeypatch.setattr(rollout, "SCALAR_BELOW", below)
    rng = np.random.default_rng(kw.pop("seed"))
    ep = run_episodes(kw.pop("policy"), kw.pop("env"), kw.pop("n"), rng, **kw)
    return ep, rng.bit_generator.state


@pytest.mark.parametrize("record", [False, True])
@pytest.mark.parametrize("case", ["plain", "t_max", "wrapper", "wrapper_t_max"])
def test_python_tail_matches_numpy_loop_bit_for_bit(monkeypatch: pytest.MonkeyPatch, record: bool,
                                                    case: str) -> None:
    """The Python engine for few active episodes is a speed-up only: every count, step and the generator state
    afterwards equal the all-numpy loop's, wherever the switch happens."""
    from agentmill.methods.backtrack_maze import RestartAfter

    for (W, K, L), n, seed in (((3, 4, 2), 200, 0), ((4, 5, 2), 64, 1), ((2, 2, 1), 150, 2), ((4, 4, 3), 32, 3)):
        env = PathStarMultigraph(W, K, L)
        pol = TabularPolicy(W, K, L)
        rng = np.random.default_rng(seed + 100)
        pol.theta_hub = rng.normal(size=W)
        pol.theta = rng.normal(size=pol.theta.shape) * 0.5
        pol.theta[:, 0, :L] += 1.0  # part-trained: E[T] in the hundreds, so every loop ends soon
        pol.theta[:, 1, L] += 1.0
        kw = {"record": record}
        if "t_max" in case:
            kw["t_max"] = 3 * K
        if "wrapper" in case:
            kw["wrapper"] = RestartAfter(K + 1, 2)
        runs = [_play(monkeypatch, below, policy=pol, env=env, n=n, seed=seed, **kw) for below in (1, 50, 10**9)]
        ref, ref_state = runs[0]
        for ep, state in runs[1:]:
            assert state == ref_state
            for name in ("steps", "success", "restarts", "hub_counts", "arm_counts", "seg_hub_counts",
                         "seg_arm_counts"):
                a, b = getattr(ep, name), getattr(ref, name)
                if b is None:
                    assert a is None
                else:
                    assert a.dtype == b.dtype and np.array_equal(a, b), name
