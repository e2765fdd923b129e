"""E168, Metis: text-first agent memory that codifies a plan into a tool only when its pattern recurs.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Dai et al., Metis (text first, code only when earned), arXiv:2606.24151"

MODULES: tuple[str, ...] = ("gate", "diagnostic", "stream", "sandbox", "lm", "perf")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
