from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.pathstar import BWD, FWD, Observation, PathStarMultigraph


@pytest.mark.parametrize("W,K,L", [(1, 3, 2), (4, 1, 2), (4, 3, 0), (2.5, 3, 2), (True, 3, 2)])
def test_bad_sizes_raise_naming_the_argument(W, K, L) -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        PathStarMultigraph(W, K, L)


def test_golden_path_reaches_the_goal_in_K_moves() -> None:
    env = PathStarMultigraph(3, 4, 2)
    env.reset(np.random.default_rng(0), goal=2)
    path = env.golden_path(2, [1, 0, 1])
    assert len(path) == env.K
    assert all(o.facing == FWD for o, _ in path) and [o.depth for o, _ in path] == [0, 1, 2, 3]
    res = [env.step(a) for _, a in path]
    assert [r.done for r in res] == [False, False, False, True] and res[-1].success
    with pytest.raises(ValueError):
        env.golden_path(3, [0, 0, 0])
    with pytest.raises(ValueError):
        env.golden_path(0, [0, 2, 0])


def test_wrong_arm_dead_end_and_backtracking_to_the_hub() -> None:
    env = PathStarMultigraph(2, 3, 1)
    env.reset(np.random.default_rng(0), goal=1)
    env.step(0)          # hub -> wrong arm 0, depth 1
    env.step(0)          # depth 2
    r = env.step(0)      # depth 3: dead end, not success
    assert r.obs == Observation(3, FWD) and not r.done
    assert list(env.legal_actions(r.obs)) == [env.back]
    with pytest.raises(ValueError, match="illegal"):
        env.step(0)
    assert env.step(env.back).obs == Observation(2, BWD)
    env.step(env.back)
    r = env.step(env.back)
    assert r.obs.at_hub
    env.step(1), env.step(0)
    assert env.step(0).success


def test_vectorised_transition_matches_scalar_steps() -> None:
    """Random legal walks: the batch transition gives the same states and successes as the scalar API."""
    env = PathStarMultigraph(3, 4, 2)
    rng = np.random.default_rng(1)
    for ep in range(30):
        goal = int(rng.integers(3))
        obs = env.reset(rng, goal=goal)
        d, f, g = np.array([0]), np.array([FWD]), np.array([False])
        for _ in range(60):
            a = int(rng.choice(list(env.legal_actions(obs))))
            r = env.step(a)
            d, f, g, ok = env.transition(d, f, g, np.array([a]), np.array([a == goal]))
            assert (int(d[0]), int(f[0]) if d[0] > 0 else FWD) == (r.obs.depth, r.obs.facing if r.obs.depth else FWD)
            assert bool(ok[0]) == r.success
            obs = r.obs
            if r.done:
                break


def test_optimal_steps() -> None:
    assert PathStarMultigraph(4, 5, 2).optimal_steps == 35
