"""E173: the progress advantage β·log(π/π_ref) as a free step grader after post-training.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Oh et al., Neglected Free Lunch from Post-training: Progress Advantage for LLM Agents, arXiv:2606.26080"

MODULES: tuple[str, ...] = (
    "exactness",
    "reward_vs_advantage",
    "token_telescoping",
    "keydoor_grader",
    "fluency_control",
    "perf",
    "lm_pair_distilled",
    "lm_pair_rl",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
