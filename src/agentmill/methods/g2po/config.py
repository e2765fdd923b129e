"""Frozen configurations of the three step-level estimators of this package: GRPO, GiGPO and G2PO-style.

Every default carries its source. G2PO's own hyperparameters are not public (no code, paper body unavailable), so
its defaults are GiGPO's where an analogue exists and reconstruction choices [R] otherwise
(docs/methods/g2po.md, Hyperparameters). Validation [R]: a bad value raises ``ValueError`` at construction, not
mid-training.
"""

from __future__ import annotations

from dataclasses import dataclass

NORMS = ("mean_std", "mean")


def _check_norm(owner: str, name: str, value: str) -> None:
    if value not in NORMS:
        raise ValueError(f"{owner}.{name} must be one of {NORMS}, got {value!r}")


def _check_common(owner: str, gamma: float | None, omega: float | None, epsilon: float) -> None:
    if gamma is not None and not (0.0 < gamma <= 1.0):
        raise ValueError(f"{owner}.gamma must be in (0, 1], got {gamma}")
    if omega is not None and omega < 0:
        raise ValueError(f"{owner}.omega must be >= 0, got {omega}")
    if not epsilon > 0:
        raise ValueError(f"{owner}.epsilon must be > 0, got {epsilon}")


@dataclass(frozen=True)
class GRPOConfig:
    """Episode-level group advantage (GRPO; g2po README)."""

    norm: str = "mean_std"
    """"mean_std": (R_i - mean_g R)/(std_g R + epsilon), the GRPO convention (DeepSeekMath; verl's
    ``compute_grpo_outcome_advantage``); "mean": R_i - mean_g R (Dr. GRPO-style, no scaling)."""
    epsilon: float = 1e-6
    """Added to the unbiased group std. 1e-6 as in verl ``core_algos``; TRL uses 1e-4 (set it to compare)."""

    def __post_init__(self) -> None:
        _check_norm("GRPOConfig", "norm", self.norm)
        _check_common("GRPOConfig", None, None, self.epsilon)


@dataclass(frozen=True)
class GiGPOConfig:
    """GiGPO: episode term plus anchor-state step term (arXiv 2505.10978 Eqs. 3-8)."""

    gamma: float = 0.95
    """Discount of the step returns G_{i,t}; verl-agent GiGPO launch scripts, ``algorithm.gamma=0.95``."""
    omega: float = 1.0
    """Weight of the step term, A = A^ep + omega * A^S; verl-agent ``algorithm.gigpo.step_advantage_w=1.0``."""
    norm: str = "mean"
    """Normalisation of both terms; verl-agent ``algorithm.gigpo.mode=mean_norm`` in its launch scripts
    ("mean_std" = ``mean_std_norm``)."""
    similarity: float | None = None
    """None: anchor groups by exact key. A threshold in (0, 1): greedy clustering by
    ``difflib.SequenceMatcher`` ratio >= threshold against each cluster's first member (verl-agent's
    similarity option uses 0.95)."""
    epsilon: float = 1e-6
    """Added to the unbiased std under "mean_std"; verl-agent ``episode_norm_reward``/``step_norm_reward``."""

    def __post_init__(self) -> None:
        _check_norm("GiGPOConfig", "norm", self.norm)
        _check_common("GiGPOConfig", self.gamma, self.omega, self.epsilon)
        if self.similarity is not None and not (0.0 < self.similarity < 1.0):
            raise ValueError(f"GiGPOConfig.similarity must be None or in (0, 1), got {self.similarity}")


@dataclass(frozen=True)
class G2POConfig:
    """G2PO-style (reconstructed) graph advantage (arXiv 2606.22995; g2po README). [R] unless marked [P]."""

    gamma: float = 0.95
    """Discount of returns and of the TD bootstrap. GiGPO's default (2505.10978 launch scripts); G2PO's own value
    is not public."""
    omega: float = 1.0
    """Weight of the graph term in ``combine="episode+graph"``. GiGPO's ``step_advantage_w``; [R] for G2PO."""
    combine: str = "episode+graph"
    """"episode+graph": A = A^ep + omega * A_hat (default; [R][I]: with no repeats the graph term is nonzero only
    on the first edge, and the paper reports G2PO level with GRPO on AppWorld); "graph": A = A_hat alone."""
    episode_norm: str = "mean_std"
    """Normalisation of the episode (GRPO) term: the GRPO convention."""
    graph_norm: str = "mean_std"
    """"mean_std": (delta - mu)/(sigma + epsilon), "globally standardizing TD errors" [P, abstract]; "mean":
    delta - mu (ablation)."""
    std_over: str = "steps"
    """Population of mu and sigma: every step instance ("steps", [R]) or each distinct edge once ("edges",
    ablation)."""
    scope: str = "group"
    """Where "global" standardisation pools: the group's graph ("group", [R]) or the whole table ("batch",
    ablation)."""
    visit: str = "every"
    """Node value V(u) = mean return over every visit ("every", [R]) or over each trajectory's first visit only
    ("first", ablation)."""
    truncation: str = "terminal"
    """Successor of a truncated last step: the group's terminal node, value 0 ("terminal", GiGPO's convention,
    2505.10978 Eq. 5) or the node of the final observation ("bootstrap", ablation)."""
    epsilon: float = 1e-6
    """Added to sigma and to the episode std; verl / GiGPO."""

    def __post_init__(self) -> None:
        _check_common("G2POConfig", self.gamma, self.omega, self.epsilon)
        _check_norm("G2POConfig", "episode_norm", self.episode_norm)
        _check_norm("G2POConfig", "graph_norm", self.graph_norm)
        for name, allowed in (("combine", ("episode+graph", "graph")), ("std_over", ("steps", "edges")),
                              ("scope", ("group", "batch")), ("visit", ("every", "first")),
                              ("truncation", ("terminal", "bootstrap"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"G2POConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
