"""The one configuration of a forensics investigation (frozen; CLI flags and experiment setups read it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForensicsConfig:
    n0: int = 40
    """Episodes that reproduce the incident before any hypothesis (base rate p0 and the CoTs the miner reads)."""
    budget: int = 600
    """Episode budget of one investigation, the reproduction included (docs/methods/forensics.md: ≤ 600)."""
    alpha: float = 0.05
    """Family-wise error rate of one investigation (Holm)."""
    power: float = 0.8
    """Power the arm sizes are planned for."""
    min_effect: float = 0.2
    """Smallest change in the concerning rate a hypothesis predicts (absolute)."""
    delta_pc: float = 0.2
    """Effect a positive control must reach (with its Newcombe bound clear of 0) for a null to be informative."""
    faithfulness: float = 0.6
    """φ: chance that a planted agent's CoT names the true cause when it acts on it."""
    decoy_rate: float = 0.3
    """δ: chance of each decoy cue in a planted agent's CoT, independent of its action."""
    min_votes: int = 2
    """Incident episodes that must show a motive's cue for the miner to propose it."""
    zero_eps: float = 0.10
    """ε of ``zero_below``: the Wilson upper bound under which a dose counts as "none"."""
    bootstrap: int = 2000
    """Bootstrap resamples of the dose-response fit."""
    seed: int = 0
    """Seed of every episode stream (``core.seeding.rng_for``)."""
