"""E162 (InfoTree, arXiv:2605.05262): advantage collapse and (later) tree-structured rollouts.

Implemented now: the collapse law, finite-sample estimators, the empirical-Bayes pool fit and group statistics
(:mod:`agentmill.methods.tree_rollouts.collapse`). The tree sampler, selectors and trainer adapters follow.
"""

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

__all__ = [
    "ZERO_STD_TOL", "GroupStats", "PoolFit", "collapse_probability", "collapse_unbiased", "expected_pool_collapse",
    "fit_pool_mixture", "group_stats", "min_group_size", "mixed_probability", "pool_collapse_curve",
    "predict_collapse", "simulate_collapse", "simulate_groups",
]
