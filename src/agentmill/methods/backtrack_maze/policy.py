"""The tabular policy of the maze and the Adam optimiser the trainers share ([R], backtrack_maze README deviation 1).

A policy sees ``(depth j, facing f)`` or "at hub" and shares its logits across arms:

- ``theta_hub``: float64 [W], logits over arms at the hub;
- ``theta``: float64 [K-1, 2, L+1], logits at depth ``j = 1..K-1`` (row ``j-1``), facing ``f`` (0 fwd, 1 bwd),
  over the ``L`` forward edges then the back edge. Depth ``K`` (a dead end) has no choice and no parameters.

Init 0 is the uniform random walk over outgoing edges: the "base model". A backward-facing state is ``(j, bwd)``.
"""

from __future__ import annotations

import math

import numpy as np

BIG = 50.0
"""Logit margin used by the analytic reference policies: e^-50 ≈ 2e-22 stands in for probability 0 while keeping
every logit finite (an infinite logit is bad input [R])."""


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


class TabularPolicy:
    """Softmax policy over the maze's moves with hub logits and per-(depth, facing) logits."""

    def __init__(self, W: int, K: int, L: int, init: str = "uniform") -> None:
        for name, val, lo in (("W", W, 2), ("K", K, 2), ("L", L, 1)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
                raise ValueError(f"TabularPolicy: {name} must be an integer >= {lo}, got {val!r}")
        self.W, self.K, self.L = int(W), int(K), int(L)
        if init == "uniform":
            self.theta_hub = np.zeros(self.W)
            self.theta = np.zeros((self.K - 1, 2, self.L + 1))
        elif init == "sft_converged":
            # SFT-converged [R]: P(back | fwd) = 0, forward edges uniform; bwd states and hub uniform.
            self.theta_hub = np.zeros(self.W)
            self.theta = np.zeros((self.K - 1, 2, self.L + 1))
            self.theta[:, 0, self.L] = -BIG
        elif init == "optimal":
            # Forward when facing forward, back when facing backward: T* = K(2W-1) [D].
            self.theta_hub = np.zeros(self.W)
            self.theta = np.zeros((self.K - 1, 2, self.L + 1))
            self.theta[:, 0, self.L] = -BIG
            self.theta[:, 1, : self.L] = -BIG
        else:
            raise ValueError(f"init must be 'uniform', 'sft_converged' or 'optimal', got {init!r}")

    # ---- parameters -------------------------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        return self.theta_hub.size + self.theta.size

    def get_flat(self) -> np.ndarray:
        return np.concatenate([self.theta_hub, self.theta.ravel()])

    def set_flat(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=float)
        if x.shape != (self.n_params,):
            raise ValueError(f"expected {self.n_params} parameters, got shape {x.shape}")
        self.theta_hub = x[: self.W].copy()
        self.theta = x[self.W:].reshape(self.K - 1, 2, self.L + 1).copy()

    def copy(self) -> TabularPolicy:
        out = TabularPolicy(self.W, self.K, self.L)
        out.theta_hub, out.theta = self.theta_hub.copy(), self.theta.copy()
        return out

    def check_finite(self) -> None:
        """Raise ValueError on a NaN/inf logit ([R]: a policy with non-finite logits is bad input)."""
        if not (np.all(np.isfinite(self.theta_hub)) and np.all(np.isfinite(self.theta))):
            raise ValueError("TabularPolicy has non-finite logits; a finite logit margin (e.g. -50) stands for "
                             "probability ~0")

    # ---- probabilities ----------------------------------------------------------------------------------------
    def hub_probs(self) -> np.ndarray:
        """float64 [W]."""
        self.check_finite()
        return _softmax(self.theta_hub)

    def arm_probs(self) -> np.ndarray:
        """float64 [K-1, 2, L+1]."""
        self.check_finite()
        return _softmax(self.theta)

    def p_back(self) -> np.ndarray:
        """P(back | depth, facing), float64 [K-1, 2]."""
        return self.arm_probs()[..., self.L]

    def summary(self) -> dict[str, float]:
        """Mean P(back) over depths for forward- and backward-facing states, and the hub's max/min ratio."""
        pb = self.p_back()
        hub = self.hub_probs()
        return {"p_back_fwd": float(pb[:, 0].mean()), "p_back_bwd": float(pb[:, 1].mean()),
                "hub_max_over_min": float(hub.max() / hub.min()) if hub.min() > 0 else math.inf}


class Adam:
    """Adam (Kingma & Ba 2015) on a flat parameter vector: beta1 0.9, beta2 0.999, eps 1e-8."""

    def __init__(self, n: int, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.lr, self.b1, self.b2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(n)
        self.v = np.zeros(n)
        self.t = 0

    def step(self, x: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """Return the updated parameters for a *minimisation* step along ``grad``."""
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad * grad
        mhat = self.m / (1 - self.b1**self.t)
        vhat = self.v / (1 - self.b2**self.t)
        return x - self.lr * mhat / (np.sqrt(vhat) + self.eps)
