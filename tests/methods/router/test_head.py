"""The linear head: soft targets, the stage-A gradient and fit, masked argmax, the ES stage."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.router.head import (evolve, fit_soft_targets, objective, route_argmax, soft_targets,
                                           softmax)


def _toy(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Query q has one active feature f = q % 3; worker f is right on it, the others wrong."""
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 3, n)
    X = np.zeros((n, 5))
    X[np.arange(n), f] = 1.0
    Y = np.zeros((n, 3))
    Y[np.arange(n), f] = 1.0
    return X, Y


def test_soft_targets() -> None:
    P = soft_targets(np.array([[1.0, 0.0]]), np.array([[0.0, 0.0]]), 0.0, 0.1)
    assert np.allclose(P.sum(1), 1) and P[0, 0] == pytest.approx(1 / (1 + np.exp(-10)))
    # the cost term moves mass towards the cheaper worker
    P2 = soft_targets(np.array([[1.0, 1.0]]), np.array([[1.0, 0.0]]), 0.4, 0.1)
    assert P2[0, 1] > 0.95
    with pytest.raises(ValueError):
        soft_targets(np.zeros((1, 2)), np.zeros((1, 2)), 0, 0)


def test_stage_a_learns_a_separable_toy_and_its_gradient_is_exact() -> None:
    X, Y = _toy()
    P = soft_targets(Y, np.zeros_like(Y), 0.0, 0.1)
    W = fit_soft_targets(X, P, l2=1e-3)
    assert (route_argmax(X, W) == Y.argmax(1)).all()
    # finite-difference check of the objective's gradient at a random point
    from scipy.optimize import check_grad

    def loss(w):
        Z = X @ w.reshape(3, 5).T
        lp = Z - np.log(np.exp(Z - Z.max(1, keepdims=True)).sum(1, keepdims=True)) - Z.max(1, keepdims=True)
        return -(P * lp).sum() / len(X) + 0.5e-3 * w @ w

    def grad(w):
        pi = softmax(X @ w.reshape(3, 5).T)
        return (((pi - P).T @ X) / len(X) + 1e-3 * w.reshape(3, 5)).ravel()

    w0 = np.random.default_rng(1).normal(size=15)
    assert check_grad(loss, grad, w0) < 1e-5


def test_masked_argmax_and_objective() -> None:
    X = np.eye(2)
    W = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    assert route_argmax(X, W).tolist() == [0, 1]
    assert route_argmax(X, W, np.array([False, True, True])).tolist() == [2, 1]
    Y = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    assert objective(np.array([0, 1]), Y, np.zeros_like(Y), 0.0, 0.0) == 1.0
    assert objective(np.array([0, 0]), Y, np.ones_like(Y), 0.1, 0.0) == pytest.approx(0.4)
    assert objective(np.array([0, 1]), Y, np.zeros_like(Y), 0.0, 1.0) == pytest.approx(1 + np.log(2) / np.log(3))


@pytest.mark.slow
def test_es_from_zero_improves_fitness_on_the_toy() -> None:
    pytest.importorskip("cmaes")
    X, Y = _toy(240)
    Xv, Yv = _toy(90, seed=1)
    W0 = np.zeros((3, 5))
    start = objective(route_argmax(Xv, W0), Yv, np.zeros_like(Yv), 0, 0)
    W, rep = evolve(W0, X, Y, np.zeros_like(Y), Xv, Yv, np.zeros_like(Yv), lam=0.0, w_div=0.0, generations=40,
                    sigma0=0.3, popsize=None, batch=64, seed=0)
    end = objective(route_argmax(Xv, W), Yv, np.zeros_like(Yv), 0, 0)
    assert start < 0.5 and end >= 0.9 and rep.best_generation > 0 and rep.n_params == 9  # 3 active columns x 3 workers
