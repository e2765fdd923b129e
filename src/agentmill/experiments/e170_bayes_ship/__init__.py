"""E170, a Bayesian verify-or-ship controller for coding agents.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = ("Papamarkou, Smirnov, Mazanov, Vazhentsev, Nakov, Baldwin, Shelmanov, Bayesian control for coding agents, "
         "arXiv:2606.24453")

MODULES: tuple[str, ...] = ("algebra", "regimes", "uq", "pyrepo", "lm", "perf", "live")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
