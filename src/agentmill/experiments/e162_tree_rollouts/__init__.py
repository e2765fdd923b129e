"""E162, InfoTree: tree-structured rollouts that spend a sampling budget where the policy is uncertain.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Hu et al., InfoTree, arXiv:2605.05262"

MODULES: tuple[str, ...] = (
    "collapse_law",
    "collapse_llm",
    "tree_synth",
    "greedy_submodular",
    "allocation_synth",
    "uucb_grid",
    "tree_llm",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
