"""E163: provable benefits of RLVR over SFT, on mazes that need backtracking.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Wei & Kim, Provable Benefits of RLVR over SFT for Reasoning Models, arXiv:2606.22938"

MODULES: tuple[str, ...] = (
    "separation",
    "distill",
    "llm",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
