"""The synthetic twin: activations with a planted outcome signal whose layer onset and position profile are known.

``SyntheticTwin`` draws prompts with a refuse probability p_x (settled 0/1 or contested), templates of
``per_template`` prompts, K samples per prompt, outcomes y ~ Bernoulli(p_x), and hidden states
``h[l, pos] = 1[l ≥ onset]·snr·a(pos)·s·u + noise`` (s = 2y − 1, u a seeded unit vector, unit Gaussian noise) with
``a(pos)`` from the profile: ``flat`` (1 everywhere), ``valley`` (1 at the ends, ``1 − depth·exp(−((φ − 0.5)/width)²)`` between), ``ramp``
(rising from 0.2 to 1). Every probe and valley code path runs on it with exact ground truth and no model [R].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PROFILES = ("flat", "valley", "ramp")


def profile_amplitude(profile: str, phi: float, depth: float = 1.0, width: float = 0.2) -> float:
    """a(φ) for a trace fraction φ ∈ [0, 1] (``think_open`` is φ = 0)."""
    if profile == "flat":
        return 1.0
    if profile == "valley":
        return float(1.0 - depth * np.exp(-((phi - 0.5) / width) ** 2))
    if profile == "ramp":
        return float(0.2 + 0.8 * phi)
    raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")


@dataclass(frozen=True)
class SyntheticTwin:
    """Twin parameters: ``n_layers`` hidden-state entries (0 = embeddings), width ``d``, signal onset layer,
    position profile and signal-to-noise ratio."""

    n_layers: int = 13
    d: int = 64
    onset: int = 6
    profile: str = "flat"
    snr: float = 2.0
    contested_share: float = 0.2
    per_template: int = 2

    def sample(self, n_prompts: int, k: int, fractions: tuple[float, ...] = (0.0,), *, seed: int = 0,
               group_offset: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(H [N, P, L, d] float32, y [N], template ids [N], prompt ids [N]) for ``n_prompts`` × ``k`` samples;
        positions are ``fractions`` of the trace (0 = think_open)."""
        rng = np.random.default_rng(seed)
        u = np.random.default_rng(12345).standard_normal(self.d)  # one direction for every split of a twin
        u /= np.linalg.norm(u)
        contested = rng.random(n_prompts) < self.contested_share
        px = np.where(contested, rng.uniform(0.2, 0.8, n_prompts), (rng.random(n_prompts) < 0.5).astype(float))
        prompt = np.repeat(np.arange(n_prompts), k) + group_offset * 10_000
        tmpl = prompt // self.per_template
        y = (rng.random(n_prompts * k) < np.repeat(px, k)).astype(int)
        s = 2 * y - 1
        amp = np.array([profile_amplitude(self.profile, f) for f in fractions])
        on = (np.arange(self.n_layers) >= self.onset).astype(float)
        H = rng.standard_normal((y.size, len(fractions), self.n_layers, self.d)).astype(np.float32)
        H += (self.snr * s[:, None, None, None] * amp[None, :, None, None] * on[None, None, :, None]
              * u[None, None, None, :]).astype(np.float32)
        return H, y, tmpl, prompt
