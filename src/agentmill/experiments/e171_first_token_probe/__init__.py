"""E171, first-token safety probes: the refusal decision is readable before the first token.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = "Ri, Panigrahi, Arora: Do Thinking Tokens Help with Safety? (arXiv:2606.25013)"

MODULES: tuple[str, ...] = ("instrument", "decodability", "lockin", "valley", "defenses", "judges",
                            "organism_smollm2")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
