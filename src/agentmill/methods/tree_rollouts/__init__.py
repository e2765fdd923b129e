"""E162 (InfoTree, arXiv:2605.05262): advantage collapse and tree-structured rollouts.

The collapse law and pool fit (:mod:`.collapse`); a prefix-sharing rollout tree over any ``ForkableLM``
(:mod:`agentmill.lm.fork`) with pluggable selectors (:mod:`.selectors`: UUCB, random, entropy, ucb, independent,
oracle greedy), budget allocation across prompts (:mod:`.allocate`), flat and tree-aware advantages
(:mod:`.advantages`), the submodular expansion objective (:mod:`.objective`), a numpy synthetic twin
(:mod:`.synthetic`), and TRL/verl adapters (:mod:`.integrations`, imported on demand).
"""

from agentmill.methods.tree_rollouts.advantages import (AdmissionReport, group_admission, grpo_advantages,
                                                        node_advantages, tree_token_advantages)
from agentmill.methods.tree_rollouts.allocate import EmptyLakeDetector, build_forest
from agentmill.methods.tree_rollouts.collapse import (
    ZERO_STD_TOL,
    GroupStats,
    PoolFit,
    collapse_probability,
    collapse_unbiased,
    expected_pool_collapse,
    fit_pool_mixture,
    group_stats,
    min_group_size,
    mixed_probability,
    pool_collapse_curve,
    predict_collapse,
    simulate_collapse,
    simulate_groups,
)
from agentmill.methods.tree_rollouts.config import AllocatorConfig, TreeConfig, UUCBConfig
from agentmill.methods.tree_rollouts.monitor import CollapseMonitor
from agentmill.methods.tree_rollouts.objective import (Instance, brute_force_opt, check_submodular, greedy,
                                                       marginal_gain, objective)
from agentmill.methods.tree_rollouts.sampler import RolloutLog, TreeGrower, build_tree, sample_independent, tree_metrics
from agentmill.methods.tree_rollouts.selectors import SELECTORS, make_selector
from agentmill.methods.tree_rollouts.synthetic import SyntheticChainLM, make_pool
from agentmill.methods.tree_rollouts.tree import (Reward, RolloutTree, every_k, step_boundary, top_entropy,
                                                  union)

__all__ = [
    "ZERO_STD_TOL", "GroupStats", "PoolFit", "collapse_probability", "collapse_unbiased", "expected_pool_collapse",
    "fit_pool_mixture", "group_stats", "min_group_size", "mixed_probability", "pool_collapse_curve",
    "predict_collapse", "simulate_collapse", "simulate_groups",
    "AdmissionReport", "group_admission", "grpo_advantages", "node_advantages", "tree_token_advantages",
    "CollapseMonitor", "EmptyLakeDetector", "build_forest", "AllocatorConfig", "TreeConfig", "UUCBConfig",
    "Instance", "brute_force_opt", "check_submodular", "greedy", "marginal_gain", "objective",
    "RolloutLog", "TreeGrower", "build_tree", "sample_independent", "tree_metrics", "SELECTORS", "make_selector",
    "SyntheticChainLM", "make_pool", "Reward", "RolloutTree", "every_k", "step_boundary", "top_entropy", "union",
]
