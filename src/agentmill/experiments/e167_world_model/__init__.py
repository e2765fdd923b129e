"""E167, a language world model for agent environments: learn the environment, judge its fidelity, train policies
inside it.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = ("Qwen Team (Y. Zuo, Z. Xiao, L. Sheng, F. Huang, … N. Ding), Qwen-AgentWorld: Language World Models for "
         "General Agents, arXiv:2606.24597")

MODULES: tuple[str, ...] = ("format_conformance", "rule_dims_validity", "judge_susceptibility", "cpt_vs_sft",
                            "sft_reasoning", "rl_fidelity", "judge_flattery_rl", "closed_loop_gap",
                            "sim_vs_real_policy", "steering", "stingy_sim", "warmup_ood", "sim_fidelity_vs_benefit",
                            "warmup_tiny", "volatile_content", "perf", "five_dims",
                            "recipe_smollm2", "warmup_smollm2", "judge_tracks_truth")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""
