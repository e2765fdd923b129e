"""E164, ConstraintRot: rules lost when an agent's context is compacted, and Constraint Pinning.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Chen, Governance Decay (ConstraintRot), arXiv:2606.22528"

REQUIRES = frozenset({"constraint-rot"})
"""Every E164 experiment builds its claims from the YAML pre-registration and rule catalogue when it is defined."""

MODULES: tuple[str, ...] = (
    "mechanism",
    "compression",
    "organism",
    "frameworks",
    "crossing",
    "instinct",
    "attack_llm",
)
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
