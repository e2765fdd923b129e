"""E169, SHERLOC: bug-localisation case files written by a read-only agent and injected into repair.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = ("Tamoyan, Narenthiran, Arakelyan, Mezini, Ginsburg, SHERLOC: Structured Diagnostic Localization for "
         "Code Repair Agents, arXiv:2606.24820")

MODULES: tuple[str, ...] = ("tools", "loop", "localize", "injection", "perf")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
