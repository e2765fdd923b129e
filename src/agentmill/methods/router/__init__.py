"""E166 (Sakana Fugu / TRINITY / Conductor): a learned router over black-box workers.

Record per-query outcome tables once (:func:`record_outcomes`), fit a bias-free linear head on query features
(soft-target L-BFGS, then sep-CMA-ES), route each query to one worker — or to a workflow of workers — with opt-out
masking. See ``docs/methods/router.md``.
"""

from agentmill.methods.router.config import LAMBDA_GRID, RouterConfig
from agentmill.methods.router.core import FitReport, RouteDecision, Router
from agentmill.methods.router.table import FingerprintMismatch, OutcomeTable, TableError, record_outcomes

__all__ = ["RouterConfig", "LAMBDA_GRID", "Router", "FitReport", "RouteDecision", "OutcomeTable",
           "record_outcomes", "FingerprintMismatch", "TableError"]
