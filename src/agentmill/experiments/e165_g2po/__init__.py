"""E165, G2PO: group-graph policy optimisation, step credit from a graph of revisited states.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Wang et al., G2PO (Group-Graph Policy Optimization), arXiv:2606.22995"

MODULES: tuple[str, ...] = (
    "advantage_quality",
    "no_repeat_collapse",
    "value_variance",
    "td_covariance",
    "learning_keydoor",
    "overhead",
    "learning_textworld",
    "llm_advantage_quality",
    "lora_smoke",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
