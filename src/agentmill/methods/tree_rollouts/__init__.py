"""E162 (InfoTree, arXiv:2605.05262): advantage collapse and tree-structured rollouts.

The collapse law and pool fit (:mod:`.collapse`); a prefix-sharing rollout tree over any ``ForkableLM``
(:mod:`agentmill.lm.fork`) with pluggable selectors (:mod:`.selectors`: UUCB, random, entropy, ucb, independent,
oracle greedy), budget allocation across prompts (:mod:`.allocate`), flat and tree-aware advantages
(:mod:`.advantages`), the submodular expansion objective (:mod:`.objective`), a numpy synthetic twin
(:mod:`.synthetic`), and TRL/verl adapters (:mod:`.integrations`, imported on demand).
"""

from agentmill.methods.tree_rollouts.advantages import group_admission, grpo_advantages, tree_token_advantages
from agentmill.methods.tree_rollouts.allocate import build_forest
from agentmill.methods.tree_rollouts.collapse import (
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
from agentmill.methods.tree_rollouts.sampler import TreeGrower, build_tree, tree_metrics
from agentmill.methods.tree_rollouts.selectors import make_selector
from agentmill.methods.tree_rollouts.synthetic import SyntheticChainLM, make_pool
from agentmill.methods.tree_rollouts.tree import Reward, RolloutTree, every_k

# The public face: what a user needs to measure collapse, grow trees and compute advantages. Everything else
# (result types, the submodular objective and its checks, other boundary rules, the empty-lake detector, …) is
# imported from its submodule, e.g. ``from agentmill.methods.tree_rollouts.objective import greedy``.
__all__ = [
    "collapse_probability", "collapse_unbiased", "expected_pool_collapse", "fit_pool_mixture", "group_stats",
    "min_group_size", "mixed_probability", "pool_collapse_curve", "predict_collapse", "simulate_collapse",
    "simulate_groups", "CollapseMonitor",
    "TreeConfig", "UUCBConfig", "AllocatorConfig", "RolloutTree", "TreeGrower", "build_tree", "build_forest",
    "tree_metrics", "make_selector", "Reward", "every_k",
    "grpo_advantages", "tree_token_advantages", "group_admission", "SyntheticChainLM", "make_pool",
]
