"""Synthetic model pairs whose ground truth is known: planted features (:func:`make_toy_pair`) and a label that only
model A carries (:func:`make_leak_pair`). The tiny tool pair (two byte-level transformers, the planted fallback of
the tool sibling) lives in :mod:`agentmill.methods.crosscoder.toolpair`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ToyPair:
    """Rows ``x`` (n, 2, d) and the planted directions (unit rows)."""

    x: np.ndarray
    shared_a: np.ndarray
    """(n_shared, d): shared features' directions in A."""
    shared_b: np.ndarray
    """(n_shared, d): the same features in B, each rotated by ≤ ``max_rotation_deg``."""
    a_only: np.ndarray
    """(n_a, d): features present in A only."""
    b_only: np.ndarray
    """(n_b, d): features present in B only."""
    shrink_a: np.ndarray
    """(d,): the feature present in A at full size and in B at ``shrink`` × (Latent Scaling's target)."""
    shrink_b: np.ndarray
    """(d,): its direction in B (before the ``shrink`` factor)."""
    shrink: float


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    v = rng.standard_normal((n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _rotate(rng: np.random.Generator, u: np.ndarray, max_deg: float) -> np.ndarray:
    """Each row of ``u`` turned by a uniform angle in [0, max_deg] towards a random orthogonal direction."""
    w = rng.standard_normal(u.shape)
    w -= (w * u).sum(1, keepdims=True) * u
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    ang = np.deg2rad(rng.uniform(0, max_deg, size=(u.shape[0], 1)))
    return np.cos(ang) * u + np.sin(ang) * w


def make_toy_pair(n: int = 200_000, d: int = 64, n_shared: int = 64, n_a: int = 8, n_b: int = 8,
                  p_active: float = 0.05, max_rotation_deg: float = 10.0, shrink: float = 0.2,
                  noise: float = 0.01, seed: int = 0) -> ToyPair:
    """Paired rows: shared features (B's direction rotated ≤ 10°), A-only and B-only features, and one feature in A
    that B carries at ``shrink`` × its size. Each feature is active with probability ``p_active`` with an Exp(1)
    magnitude, independently per row; isotropic noise ``noise`` per coordinate."""
    rng = np.random.default_rng(seed)
    shared_a = _unit(rng, n_shared, d)
    shared_b = _rotate(rng, shared_a, max_rotation_deg)
    a_only, b_only = _unit(rng, n_a, d), _unit(rng, n_b, d)
    shrink_a = _unit(rng, 1, d)
    shrink_b = _rotate(rng, shrink_a, max_rotation_deg)

    def codes(k: int) -> np.ndarray:
        return (rng.random((n, k)) < p_active) * rng.exponential(1.0, (n, k))

    c_sh, c_a, c_b, c_s = codes(n_shared), codes(n_a), codes(n_b), codes(1)
    xa = c_sh @ shared_a + c_a @ a_only + c_s @ shrink_a + noise * rng.standard_normal((n, d))
    xb = c_sh @ shared_b + c_b @ b_only + shrink * (c_s @ shrink_b) + noise * rng.standard_normal((n, d))
    x = np.stack([xa, xb], 1).astype(np.float32)
    return ToyPair(x, shared_a, shared_b, a_only, b_only, shrink_a[0], shrink_b[0], shrink)


@dataclass(frozen=True)
class LeakPair:
    """Rows ``x`` (n, 2, d), the binary label ``s`` (n,) and the direction ``u`` it toggles in A only."""

    x: np.ndarray
    s: np.ndarray
    u: np.ndarray


def make_leak_pair(n: int = 40_000, d: int = 64, n_shared: int = 64, p_active: float = 0.05,
                   max_rotation_deg: float = 10.0, label_size: float = 2.0, noise: float = 0.01,
                   seed: int = 0) -> LeakPair:
    """Shared features as :func:`make_toy_pair`; a label s ~ Bernoulli(½) adds ``label_size``·(1 + Exp(1))·u to
    x^A only, so h_B is independent of s by construction and any probe on h_B sits at chance."""
    rng = np.random.default_rng(seed)
    shared_a = _unit(rng, n_shared, d)
    shared_b = _rotate(rng, shared_a, max_rotation_deg)
    u = _unit(rng, 1, d)[0]
    c = (rng.random((n, n_shared)) < p_active) * rng.exponential(1.0, (n, n_shared))
    s = rng.random(n) < 0.5
    mag = label_size * (1 + rng.exponential(1.0, n)) * s
    xa = c @ shared_a + mag[:, None] * u + noise * rng.standard_normal((n, d))
    xb = c @ shared_b + noise * rng.standard_normal((n, d))
    return LeakPair(np.stack([xa, xb], 1).astype(np.float32), s.astype(np.int8), u)
