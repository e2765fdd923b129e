"""Configuration of the progress-advantage scorer (E173, arXiv:2606.26080; docs/methods/progress_advantage.md,
Hyperparameters).

Defaults follow the official code (github.com/deeplearning-wisc/progress-advantage, MIT) where it has one, and
this project's pre-registration [R] otherwise; each field says which.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKEN_AGGS = ("sum", "mean", "min", "max", "last")
STEP_AGGS = ("sum", "mean", "min", "max", "last", "bottom10")
RATIO_MODES = ("per_token", "separate")
ACTION_SPACES = ("free_text", "candidates")


@dataclass(frozen=True)
class PAConfig:
    beta: float = 1.0
    """β in A_t = β·log(π_θ/π_ref). Official default 1.0 (`runners/*.py --beta`); it rescales every score and
    changes no ranking within one pair. Exactness needs the β actually used in KL-regularised training (arXiv:2606.26080
    [A])."""
    token_agg: str = "sum"
    """How token log-ratios of one action become a step score: sum|mean|min|max|last. `sum` is the only exact one:
    token log-ratios telescope to A*(s, a) [D] (deterministic, unrewarded transitions inside an action); the others are
    heuristics."""
    step_agg: str = "sum"
    """How step scores become a trajectory score: sum|mean|min|max|last|bottom10 (bottom10 = mean of the lowest
    ⌈0.1·T⌉). Pre-registered `sum` for best-of-N and success prediction [D]: with γ = 1,
    Σ_t A*_t = return − V*(s_0) + V*(s_T) + transition noise."""
    ratio_mode: str = "per_token"
    """`per_token`: A_t = β·agg(lp_θ − lp_ref) (default). `separate`: A_t = β·(agg(lp_θ) − agg(lp_ref)), the
    semantics of the official `pa/scoring.py`; equal for sum/mean/last, different for min/max."""
    action_space: str = "free_text"
    """`free_text`: log π of the action string itself. `candidates`: log π(a|s) = ℓ(a) − logsumexp_{b∈C} ℓ(b) over
    the admissible set C, the policy a candidate-choosing agent actually has [D] (README deviation 5); the free-text
    score is off by a per-state constant there."""
    truncate: str = "error"
    """`error`: a sequence longer than the model context raises. `left`: drop the oldest tokens; steps that lose
    tokens score NaN and are counted (the official scorer silently scored them 0.0 — README deviation 1)."""
    top_k: int = 0
    """k of the top-k mean log-prob kept for the Self-Certainty/DeepConf baselines; 0 = not computed. The official
    code uses 20 (`runners/fa.py --top-k`)."""
    allow_cross_tokenizer: bool = False
    """Allow two models whose tokenizers differ (each then scores its own tokenization of the same text); only
    meaningful with token_agg='sum', where the per-action total does not depend on how text is cut [R]."""

    def __post_init__(self) -> None:
        if not (self.beta > 0 and self.beta < float("inf")):
            raise ValueError(f"PAConfig: beta must be > 0, got {self.beta}")
        if self.token_agg not in TOKEN_AGGS:
            raise ValueError(f"PAConfig: token_agg must be one of {TOKEN_AGGS}, got {self.token_agg!r}")
        if self.step_agg not in STEP_AGGS:
            raise ValueError(f"PAConfig: step_agg must be one of {STEP_AGGS}, got {self.step_agg!r}")
        if self.ratio_mode not in RATIO_MODES:
            raise ValueError(f"PAConfig: ratio_mode must be one of {RATIO_MODES}, got {self.ratio_mode!r}")
        if self.action_space not in ACTION_SPACES:
            raise ValueError(f"PAConfig: action_space must be one of {ACTION_SPACES}, got {self.action_space!r}")
        if self.truncate not in ("error", "left"):
            raise ValueError(f"PAConfig: truncate must be 'error' or 'left', got {self.truncate!r}")
        if self.top_k < 0:
            raise ValueError(f"PAConfig: top_k must be >= 0, got {self.top_k}")
        if self.allow_cross_tokenizer and self.token_agg != "sum":
            raise ValueError("PAConfig: allow_cross_tokenizer needs token_agg='sum' (other aggregations depend on "
                             "where each tokenizer cuts the text)")
        if self.action_space == "candidates" and self.token_agg != "sum":
            raise ValueError("PAConfig: action_space='candidates' scores whole candidates (ℓ = summed token "
                             "log-probs); token_agg must be 'sum'")
