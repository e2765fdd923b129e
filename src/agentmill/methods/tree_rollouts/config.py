"""Configuration of the tree sampler, its UUCB score and the cross-prompt allocator (frozen, documented).

Defaults are this project's choices ([R]; docs/methods/tree_rollouts.md, Hyperparameters): the paper does not publish
its constants. They were set on the development pool of the synthetic chain model (pool seed 1); claim runs use pool
seeds >= 1000.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UUCBConfig:
    c: float = 0.25
    """Exploration scale: u_x = c * sqrt(ln(1 + N) / (1 + n_x)) [R]."""
    lam: float = 0.5
    """Weight of the token-entropy term D(x) = 1 - exp(-H_x)."""
    beta: float = 0.0
    """Weight of internal-node groups in the objective (the root group has weight 1). 0 = root group only."""
    m: float = 2.0
    """Strength of the hierarchical prior: a prefix's prior is Beta(m*mu_parent, m*(1-mu_parent))."""
    prior: tuple[float, float] = (1.0, 1.0)
    """Beta prior (alpha0, beta0) of the root's success probability."""
    entropy_transform: str = "exp"
    """How branch entropy H enters: "exp" (1 - e^-H, default), "gini" (1 - sum p^2, needs the distribution;
    falls back to exp here) or "raw" (H itself)."""

    def __post_init__(self) -> None:
        if self.c < 0 or self.lam < 0 or self.beta < 0 or self.m <= 0:
            raise ValueError(f"UUCBConfig: c, lam, beta must be >= 0 and m > 0, got {self}")
        if min(self.prior) <= 0:
            raise ValueError(f"UUCBConfig: prior must be positive, got {self.prior}")
        if self.entropy_transform not in ("exp", "gini", "raw"):
            raise ValueError(f"UUCBConfig: entropy_transform must be exp|gini|raw, got {self.entropy_transform!r}")


@dataclass(frozen=True)
class TreeConfig:
    budget_tokens: int | None = 800
    """Generated-token budget of one tree (sampled tokens, EOS included). None = only max_leaves limits it."""
    max_leaves: int | None = None
    """Stop after this many leaves (TRL mode: exactly G). None = only the token budget limits it."""
    seed_rollouts: int = 2
    """m0: independent root samples drawn before any selection (Tree-GRPO also starts from M chains)."""
    wave: int = 1
    """b: candidates chosen per batch with virtual updates in between (speculative expansion staleness)."""
    max_new_tokens: int = 48
    """Longest continuation of one expansion."""
    temperature: float = 1.0
    """Sampling temperature; must equal the trainer's (TRL rescales logits by args.temperature)."""
    max_branch_points_per_leaf: int = 8
    """Cap on candidate positions contributed by one leaf (root excluded)."""
    max_expansions: int | None = None
    """Hard cap on expansions (default 4 * max_leaves, or budget / 8)."""
    reward_threshold: float | None = None
    """Rewards >= threshold count as success for the Beta posterior; None requires rewards in {0, 1}."""

    def __post_init__(self) -> None:
        if self.budget_tokens is None and self.max_leaves is None:
            raise ValueError("TreeConfig: set budget_tokens, max_leaves or both")
        if self.max_leaves is not None and self.max_leaves < 1:
            raise ValueError(f"TreeConfig: max_leaves must be >= 1, got {self.max_leaves}")
        if self.seed_rollouts < 1 or self.wave < 1 or self.max_new_tokens < 1:
            raise ValueError(f"TreeConfig: seed_rollouts, wave, max_new_tokens must be >= 1, got {self}")
        if self.temperature <= 0:
            raise ValueError(f"TreeConfig: temperature must be > 0, got {self.temperature}")

    def expansion_cap(self) -> int:
        if self.max_expansions is not None:
            return self.max_expansions
        if self.max_leaves is not None:
            return 4 * self.max_leaves
        return max(1, int(self.budget_tokens or 0) // 8)


@dataclass(frozen=True)
class AllocatorConfig:
    kind: str = "uniform"
    """"uniform" (same budget per prompt) or "aba_lite" (value-only marginal gain per expected token)."""
    budget_per_prompt: int = 800
    """Mean generated-token budget per prompt; the forest's total is this times the number of prompts."""
    p_floor: float = 0.02
    """Empty-lake detector: flag a prompt when k = 0, n >= 8 and the Jeffreys 95% upper bound on p < p_floor."""
    decay: float = 0.9
    """Empty-lake detector: old counts decay by this factor per visit (epoch)."""

    def __post_init__(self) -> None:
        if self.kind not in ("uniform", "aba_lite"):
            raise ValueError(f"AllocatorConfig: kind must be uniform|aba_lite, got {self.kind!r}")
        if self.budget_per_prompt < 1:
            raise ValueError(f"AllocatorConfig: budget_per_prompt must be >= 1, got {self.budget_per_prompt}")
