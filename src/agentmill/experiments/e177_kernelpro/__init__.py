"""E177, KernelPro: diagnose, then prescribe, then search over compiled CPU kernels.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = ("Gai, Zhang, Bostrom, Huang, Patil, Fang, Wang, Rangwala, Karypis, Optimizing CUDA like a Human: "
         "Micro-Profiling Tools as Expert Surrogates for LLM-Based GPU Kernel Optimization (KernelPro), "
         "arXiv:2606.26453")

MODULES: tuple[str, ...] = ("roofline", "tools", "wall", "search", "live", "llm", "cuda_static", "perf",
                           "search_budget")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
