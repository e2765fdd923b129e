"""AutoCog (E176): closed-loop discovery of decision theories written as code (arXiv:2606.26448).

Theories are executable programs with parameter priors (sampled, never fitted); two advocates propose designs that
pass a simulated discrimination gate; data come from a hidden ground truth or real participants (FastAPI web app);
every theory is scored on every observation; an arbiter and a reviser replace one slot per round. Every step is
ledgered (hash chain) and resumable. See README.md.
"""

from agentmill.core.ledger import Ledger
from agentmill.methods.autocog import library
from agentmill.methods.autocog.agents.base import Critique, PoolView, Proposal, Revision, Verdict
from agentmill.methods.autocog.agents.search import LossCritic, ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.cohorts import HumanCohort, ReplayCohort, ReplayObservation, SimulatedCohort
from agentmill.methods.autocog.config import AutoCogConfig
from agentmill.methods.autocog.design import Design, random_design
from agentmill.methods.autocog.classify import Classification, classify
from agentmill.methods.autocog.gate import GateResult, calibrate_jsd_threshold, jsd_gate, power_gate, welch_gate
from agentmill.methods.autocog.jsd import jsd, sequence_jsd, static_jsd
from agentmill.methods.autocog.library import REGISTRY, program, theory_from_spec
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig, RunResult
from agentmill.methods.autocog.metrics import CodeMetric, MetricValue, TemplateMetric
from agentmill.methods.autocog.properties import PropertyResult, check_properties
from agentmill.methods.autocog.scoring import aggregate_loss, leaderboard, normalized_distances, prospective_scores
from agentmill.methods.autocog.simulate import Data, expected_choice_props, simulate
from agentmill.methods.autocog.theory import (Bind, Choice, CodeTheory, Interval, LibraryTheory, ParamSpace,
                                              VectorInterval, load_theory_yaml, theory_from_repo_record)

__all__ = [
    "library", "REGISTRY", "program", "theory_from_spec", "Bind", "Choice", "Interval", "LibraryTheory",
    "ParamSpace", "VectorInterval", "Design", "random_design", "Data", "simulate", "expected_choice_props",
    "MetricValue", "TemplateMetric", "GateResult", "welch_gate", "aggregate_loss", "leaderboard",
    "normalized_distances", "Ledger", "AutoCogLoop", "LoopConfig", "RunResult", "PoolView", "Proposal", "Revision",
    "Verdict", "ProgramSpaceReviser", "RuleArbiter", "SearchAdvocate", "SimulatedCohort", "HumanCohort",
    "AutoCogConfig", "power_gate", "jsd_gate", "calibrate_jsd_threshold", "jsd", "static_jsd", "sequence_jsd",
    "prospective_scores", "Classification", "classify", "PropertyResult", "check_properties", "CodeMetric",
    "Critique", "LossCritic", "ReplayCohort", "ReplayObservation", "CodeTheory", "load_theory_yaml",
    "theory_from_repo_record",
]
