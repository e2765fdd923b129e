"""E176, AutoCog: automated discovery of cognitive theories, run with real participants.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Jagadish et al., AutoCog, arXiv:2606.26448"

MODULES: tuple[str, ...] = (
    "library",
    "gate",
    "recovery",
    "scoring",
    "resume",
    "sandbox",
    "strawman",
    "durability",
    "browser",
    "llm",
    "perf",
    "fixture",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
