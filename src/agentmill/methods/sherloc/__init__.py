"""SHERLOC (arXiv 2606.24820): structured diagnostic localization for code repair agents.

One LM, four read-only tools over a git snapshot and a self-recovering loop write a diagnostic case file
(locations plus five findings fields); the case file is validated, scored with the recipe's metrics, filtered by
a confidence model that never reads the gold patch, and injected into a repair agent. See docs/methods/sherloc.md.
"""

from agentmill.methods.sherloc.casefile import SCHEMA, CaseFileError, new_case_file, render, validate
from agentmill.methods.sherloc.confidence import ConfidenceModel, features, injection_decision
from agentmill.methods.sherloc.config import SherlocConfig
from agentmill.methods.sherloc.core import LocalizationResult, localize
from agentmill.methods.sherloc.evaluate import Location, aggregate, gold_locations, score
from agentmill.methods.sherloc.repair import RepairRun, repair
from agentmill.methods.sherloc.scripted import RepairOutcome, ScriptedLocalizer, scripted_repair
from agentmill.methods.sherloc.snapshot import RepoSnapshot, SnapshotError
from agentmill.methods.sherloc.tools import Tools

__all__ = ["CaseFileError", "ConfidenceModel", "LocalizationResult", "Location", "RepairOutcome", "RepairRun",
           "RepoSnapshot", "SCHEMA", "ScriptedLocalizer", "SherlocConfig", "SnapshotError", "Tools", "aggregate",
           "features", "gold_locations", "injection_decision", "localize", "new_case_file", "render", "repair", "score",
           "scripted_repair", "validate"]
