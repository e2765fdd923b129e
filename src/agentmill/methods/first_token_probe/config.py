"""Configuration of the first-token probe method: one frozen dataclass per part, a docstring under every field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeConfig:
    """Linear probes on hidden states (docs/methods/first_token_probe.md, "Probes") [R; logistic-regression probes
    as in Chan et al., arXiv 2507.12428]."""

    C_grid: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0)
    """Inverse L2 strengths tried by the inner cross-validation."""
    inner_folds: int = 5
    """Grouped (by template) inner folds that choose C and the headline layer on train only."""
    n_shuffles: int = 20
    """Label permutations per (position, layer) cell for the null band."""
    bootstrap: int = 1000
    """Template-cluster bootstrap resamples of the test AUROC."""
    min_per_class: int = 20
    """Fewer samples of a class in train (half that in test) raises DegenerateLabels."""
    seed: int = 0
    """Seed of folds, permutations and bootstraps."""


@dataclass(frozen=True)
class OrganismConfig:
    """Recipe of the tiny refusal organisms [R]: ``TinyLM(layers=3, d=64)`` from scratch on the trace grammar."""

    layers: int = 3
    """Transformer blocks."""
    d: int = 64
    """Residual width."""
    heads: int = 4
    """Attention heads."""
    max_len: int = 512
    """Context in bytes (the longest training example is ~430)."""
    n_examples: int = 6000
    """Training examples (one trace per sampled organism_train prompt)."""
    steps: int = 1000
    """Optimiser steps."""
    batch: int = 16
    """Examples per step."""
    lr: float = 4e-3
    """Peak AdamW learning rate."""
    decision_weight: float = 5.0
    """Loss weight on the decision-bearing bytes (decision-site sentence, decision sentence, answer); 1 elsewhere.
    Added after the first recipe (weight 1, 1,000 steps) failed R2–R6: it had not learned to condition on the
    request (docs/LOG.md)."""
    warmup_frac: float = 0.05
    """Share of steps with a linear warm-up before the cosine decay."""
    seed: int = 0
    """Seed of data, initialisation and batch order."""


@dataclass(frozen=True)
class FreezeConfig:
    """Prefix-freeze resampling [R, following the paper's design]."""

    resamples: int = 4
    """Continuations R sampled from every freeze point."""
    lam: float = 0.9
    """Locked at k iff the agreement A(k') ≥ lam at every freeze point k' ≥ k (R = 4 needs 4/4)."""
    temperature: float = 1.0
    """Sampling temperature (as the base rollouts; the forker needs T > 0)."""
    max_new_tokens: int = 400
    """Cap per continuation (bytes for the tiny organisms)."""
