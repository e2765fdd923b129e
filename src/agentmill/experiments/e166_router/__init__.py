"""E166, Sakana Fugu: a learned router over black-box workers that beats the best single worker.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Sakana AI, Fugu technical report (learned routing over black-box workers), arXiv:2606.21228"

MODULES: tuple[str, ...] = ("table", "fast", "workflow", "controls", "perf")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
