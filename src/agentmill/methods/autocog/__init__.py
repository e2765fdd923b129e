"""AutoCog (E176): closed-loop discovery of decision theories written as code (arXiv:2606.26448).

Theories are executable programs with parameter priors (sampled, never fitted); two advocates propose designs that
pass a simulated discrimination gate; data come from a hidden ground truth or real participants (FastAPI web app);
every theory is scored on every observation; an arbiter and a reviser replace one slot per round. Every step is
ledgered (hash chain) and resumable. See README.md.
"""

from agentmill.methods.autocog import library
from agentmill.methods.autocog.agents.search import LossCritic, ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.cohorts import HumanCohort, SimulatedCohort
from agentmill.methods.autocog.design import Design, random_design
from agentmill.methods.autocog.gate import welch_gate
from agentmill.methods.autocog.library import REGISTRY, program, theory_from_spec
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig, RunResult
from agentmill.methods.autocog.metrics import CodeMetric, TemplateMetric
from agentmill.methods.autocog.scoring import leaderboard, prospective_scores
from agentmill.methods.autocog.simulate import Data, simulate
from agentmill.methods.autocog.theory import CodeTheory, ParamSpace, load_theory_yaml

# The names a user needs (docs/methods/autocog.md, "Use it"); everything else is imported from its submodule.
__all__ = [
    "library", "REGISTRY", "program", "theory_from_spec", "ParamSpace", "CodeTheory", "load_theory_yaml",
    "Design", "random_design", "simulate", "Data", "TemplateMetric", "CodeMetric", "welch_gate", "leaderboard",
    "prospective_scores", "AutoCogLoop", "LoopConfig", "RunResult", "SearchAdvocate", "RuleArbiter",
    "ProgramSpaceReviser", "LossCritic", "SimulatedCohort", "HumanCohort",
]
