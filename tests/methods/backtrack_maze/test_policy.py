from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.backtrack_maze import Adam, TabularPolicy


def test_shapes_and_uniform_init() -> None:
    p = TabularPolicy(3, 4, 2)
    assert p.theta_hub.shape == (3,) and p.theta.shape == (3, 2, 3) and p.n_params == 3 + 18
    assert np.allclose(p.hub_probs(), 1 / 3) and np.allclose(p.arm_probs(), 1 / 3)
    x = np.arange(p.n_params, dtype=float)
    p.set_flat(x)
    assert np.array_equal(p.get_flat(), x)
    q = p.copy()
    q.theta[0, 0, 0] = 99
    assert p.theta[0, 0, 0] != 99


@pytest.mark.parametrize("args", [(1, 3, 2), (3, 1, 2), (3, 3, 0)])
def test_bad_sizes(args) -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        TabularPolicy(*args)


def test_bad_init_and_flat_length() -> None:
    with pytest.raises(ValueError, match="init"):
        TabularPolicy(2, 2, 1, init="random")
    with pytest.raises(ValueError, match="parameters"):
        TabularPolicy(2, 2, 1).set_flat(np.zeros(3))


def test_reference_policies() -> None:
    s = TabularPolicy(4, 5, 2, init="sft_converged").summary()
    assert s["p_back_fwd"] < 1e-20 and s["p_back_bwd"] == pytest.approx(1 / 3)
    o = TabularPolicy(4, 5, 2, init="optimal").summary()
    assert o["p_back_fwd"] < 1e-20 and o["p_back_bwd"] == 1.0


def test_adam_minimises_a_quadratic() -> None:
    opt = Adam(2, lr=0.1)
    x = np.array([3.0, -2.0])
    for _ in range(500):
        x = opt.step(x, 2 * x)
    assert np.abs(x).max() < 1e-2
    with pytest.raises(ValueError):
        Adam(2, lr=0)
