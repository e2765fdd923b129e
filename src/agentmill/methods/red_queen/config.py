"""The one frozen configuration of a Red Queen search. A bad value raises at construction, naming the field."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class RedQueenConfig:
    budget: int = 512
    """Utility evaluations in the run (the re-implementation's default is 256 [C]; 512 [R])."""
    ucb_air_alpha: float = 0.6
    """UCB-Air: expand when n_evals^α ≥ |archive| (HGM config.yaml [C])."""
    checkpoint_min: int = 8
    """First checkpoint (re-implementation [C])."""
    checkpoint_base: int = 2
    """Checkpoints at checkpoint_min·base^q ≤ budget, plus the budget (re-implementation [C])."""
    statistic: Literal["mcnemar", "best_belief"] = "mcnemar"
    """Replacement rule: paired one-sided exact McNemar at α/K (project default [R]) or strict best-belief on the
    anchor (the paper-faithful reading [C][S])."""
    alpha: float = 0.05
    """Family-wise level per checkpoint (Bonferroni over its K challengers) [R]."""
    bb_epsilon: float = 0.05
    """Best-belief quantile ε [C]."""
    min_anchor_outcomes: int = 50
    """Anchor items a candidate needs before best-belief compares it (re-implementation 5 [C]; 50 [R])."""
    min_node_evals: int = 5
    """Valid records a node needs to be the final pick [C]."""
    n_challengers: int = 4
    """Challengers per slot per checkpoint, K [R]."""
    trap: Literal["audit", "parity", "off"] = "audit"
    """The adversarial challenger: fit on train ∪ audited trap documents (audit), on train with a parity penalty
    only (parity), or none (off: all K challengers are mutations) [R]."""
    audit_labels_per_checkpoint: int = 20
    """Oracle labels the audit may buy per checkpoint (M = 20 trap documents) [R]."""
    erasure: Literal["invalidate", "off"] = "invalidate"
    """On replacement, invalidate every dependent record tagged with the displaced judge [A][C]; off = ablation."""
    judge_evolution: bool = True
    """False freezes every slot's incumbent: no checkpoint tests at all (the frozen-judge baseline)."""
    seed: int = 0
    """Root of every per-evaluation random stream (core.seeding.rng_for)."""

    def __post_init__(self) -> None:
        if self.checkpoint_min < 1:
            raise ValueError(f"checkpoint_min must be >= 1, got {self.checkpoint_min}")
        if self.budget < self.checkpoint_min:
            raise ValueError(f"budget ({self.budget}) must be >= checkpoint_min ({self.checkpoint_min}): no "
                             f"checkpoint would ever run; raise budget or lower checkpoint_min")
        if self.checkpoint_base < 2:
            raise ValueError(f"checkpoint_base must be >= 2, got {self.checkpoint_base}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 < self.bb_epsilon < 1:
            raise ValueError(f"bb_epsilon must be in (0, 1), got {self.bb_epsilon}")
        if not 0 < self.ucb_air_alpha <= 1:
            raise ValueError(f"ucb_air_alpha must be in (0, 1], got {self.ucb_air_alpha}")
        if self.n_challengers < 1:
            raise ValueError(f"n_challengers must be >= 1, got {self.n_challengers}")
        if self.statistic not in ("mcnemar", "best_belief"):
            raise ValueError(f"statistic must be 'mcnemar' or 'best_belief', got {self.statistic!r}")
        if self.trap not in ("audit", "parity", "off"):
            raise ValueError(f"trap must be 'audit', 'parity' or 'off', got {self.trap!r}")
        if self.erasure not in ("invalidate", "off"):
            raise ValueError(f"erasure must be 'invalidate' or 'off', got {self.erasure!r}")
        if self.min_anchor_outcomes < 1 or self.min_node_evals < 1:
            raise ValueError("min_anchor_outcomes and min_node_evals must be >= 1")
        if self.audit_labels_per_checkpoint < 0:
            raise ValueError(f"audit_labels_per_checkpoint must be >= 0, got {self.audit_labels_per_checkpoint}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
