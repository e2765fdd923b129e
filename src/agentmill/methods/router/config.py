"""Router configuration (one frozen dataclass; CLI flags come from it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LAMBDA_GRID = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)
"""The cost-weight grid searched by ``cost_lambda="auto"`` and by the cost sweep [R]."""


@dataclass(frozen=True)
class RouterConfig:
    features: str = "ngram"
    """``"ngram"`` (hashed word 1–2-grams + char 2–4-grams, 2^14 dims) or ``"hidden:<lm spec>[:last|:mean]"``."""
    tau: float = 0.1
    """Soft-target temperature of stage A [R]; the report does not disclose it."""
    cost: Literal["latency", "tokens", "usd"] = "latency"
    """Which recorded column is the cost: ``latency`` (seconds) or the table's ``cost`` column (tokens / USD)."""
    cost_lambda: float | Literal["auto"] = 0.0
    """λ in p_q and in the ES fitness; ``"auto"`` = the largest grid λ whose validation accuracy is within 1 point
    of λ = 0."""
    l2: float = 1e-3
    """ℓ2 weight of stage A."""
    sft: bool = True
    """Run stage A (soft-target fit); False starts the ES from W = 0 ("ES alone")."""
    es: bool = True
    """Run stage B (sep-CMA-ES)."""
    es_generations: int = 60
    """Generations of stage B (a third-party reading of TRINITY's released log [S])."""
    es_sigma0: float = 0.03
    """Initial step: 0.03 × RMS of the stage-A weights [S value, R scaling]; absolute when starting from W = 0."""
    es_popsize: int | None = None
    """None → the cmaes default 4 + ⌊3 ln N⌋ for N = entries of W."""
    es_batch: int = 256
    """Training queries per generation's fitness minibatch."""
    es_patience: int = 20
    """Stop after this many generations without a validation gain (the best-on-validation W is kept)."""
    diversity_bonus: float = 0.0
    """w_div of the ES fitness (TRINITY log value 0.15 [S]); 0 in every claim."""
    include_workflows: bool = False
    """Let the head choose workflow pseudo-workers (``wf:…`` columns of the table) beside single workers."""
    seed: int = 0
    """Seed of the ES and its minibatches."""

    def __post_init__(self) -> None:
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if self.cost not in ("latency", "tokens", "usd"):
            raise ValueError(f"cost must be latency, tokens or usd, got {self.cost!r}")
        if self.cost_lambda != "auto" and (not isinstance(self.cost_lambda, (int, float)) or
                                           float(self.cost_lambda) not in LAMBDA_GRID):
            raise ValueError(f"cost_lambda must be 'auto' or one of {LAMBDA_GRID}, got {self.cost_lambda!r}")
        if self.es_generations < 0 or self.es_batch < 1:
            raise ValueError("es_generations must be >= 0 and es_batch >= 1")
        if self.es_sigma0 <= 0:
            raise ValueError(f"es_sigma0 must be > 0, got {self.es_sigma0}")
        if not self.sft and not self.es:
            raise ValueError("sft=False needs es=True (otherwise nothing is trained)")
