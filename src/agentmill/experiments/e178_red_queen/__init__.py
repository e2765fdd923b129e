"""E178, Red Queen Gödel Machine: self-improvement whose judge co-evolves, with stale utility erased.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Red Queen Gödel Machine (Cambridge, NVIDIA, Flower Labs, MBZUAI, Inria), arXiv:2606.26294"

MODULES: tuple[str, ...] = ("invariants", "statistic", "review", "perf", "lm_judge")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
