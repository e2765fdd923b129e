"""E172, cliff tokens: single-token failure triggers in mathematical reasoning.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use. ``scans.py`` holds the oracle scans they share."""

PAPER = ("Ko, Kang, Lee, Cliff Tokens: Identifying Single-Token Failure Triggers in LLM Mathematical Reasoning, "
         "arXiv:2606.25524")

MODULES: tuple[str, ...] = ("ztest", "estimator", "localization", "taxonomy", "deterministic", "deletion",
                            "eos_quirk", "dpo_compute", "dpo_types", "perf",
                            "tiny_estimator", "tiny_localization", "tiny_deterministic", "perf_smollm2",
                            "smollm2_demo")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
