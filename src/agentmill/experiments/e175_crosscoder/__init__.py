"""E175, crosscoder model diffing: localising RL-induced tool use to a crosscoder feature.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = ("Shportko, Bhokare, Alzahrani, Cheng, Mercier, Hullman: Localizing RL-Induced Tool Use to a Single "
         "Crosscoder Feature, arXiv 2606.26474 (2026)")

MODULES: tuple[str, ...] = ("partition_algebra", "toy_recovery", "toy_leak", "organism_gate",
                            "organism_gate_smollm2", "routing", "steering",
                            "spillover_leak", "ablation", "template_detector", "single_vs_many", "excl_penalty",
                            "layers", "perf")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
