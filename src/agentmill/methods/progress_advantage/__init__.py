"""E173 progress advantage (arXiv 2606.26080): β·log(π/π_ref) step scores from a (trained policy, reference) pair.

Public API: :class:`PAConfig`, :class:`ProgressAdvantageScorer` (any two LMs of the lm layer), the array-level
functions of :mod:`.core` (aggregations, best-of-N, step-error / success AUROC, failure attribution, the tabular
log-ratio), and the exactness checks of :mod:`.exactness`.
"""

from agentmill.methods.progress_advantage.config import PAConfig
from agentmill.methods.progress_advantage.core import (Attribution, BoNResult, aggregate_steps, aggregate_tokens,
                                                       attribute_failure, attribution_metrics, best_of_n,
                                                       step_error_auroc, success_auroc,
                                                       tabular_progress_advantage)
from agentmill.methods.progress_advantage.scorer import (Episode, ProgressAdvantageScorer, StepScores, chat_episode,
                                                         episodes_from_table)

__all__ = [
    "PAConfig", "ProgressAdvantageScorer", "Episode", "StepScores", "chat_episode", "episodes_from_table",
    "aggregate_tokens", "aggregate_steps", "best_of_n", "BoNResult", "step_error_auroc", "success_auroc",
    "attribute_failure", "attribution_metrics", "Attribution", "tabular_progress_advantage",
]
