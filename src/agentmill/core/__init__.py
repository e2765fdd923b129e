"""Substrate shared by every layer: types, statistics, run records, seeding, executors.

Imports only numpy/scipy and the standard library; never another agentmill package.
"""

from agentmill.core.executor import Executor, make_executor
from agentmill.core.records import RunRecord
from agentmill.core.seeding import derive_seed, rng_for, seed_everything
from agentmill.core.stats import (Estimate, TostResult, bootstrap_ci, mean_estimate, paired_diff,
                                  proportion_estimate, tost)
from agentmill.core.types import Group, Message, Step, ToolCall, Trajectory

__all__ = [
    "Estimate", "TostResult", "bootstrap_ci", "mean_estimate", "paired_diff", "proportion_estimate", "tost",
    "RunRecord", "derive_seed", "rng_for", "seed_everything", "Executor", "make_executor",
    "Message", "ToolCall", "Step", "Trajectory", "Group",
]
