"""Model forensics: find out why an agent did something concerning, with pre-registered, single-variable tests.

Environments with typed variables (:mod:`.envs`), counterfactual replay that changes exactly one thing
(:mod:`.episode`, :mod:`.variables`), a hash-chained hypothesis registry (:mod:`.hypotheses`), power-planned arms
(:mod:`.planner`), dose-response fits (:mod:`.dose`), verdict rules with positive controls (:mod:`.verdicts`), the
investigation loop (:mod:`.investigate`) and interrogation (:mod:`.interrogate`); episode mode in an in-memory
workspace (:mod:`.episode_mode`, :mod:`.workspace`) and the tiny agent organism (:mod:`.organism`).
docs/methods/forensics.md walks through them.
"""

from agentmill.methods.forensics.agents import LMAgent, PlantedAgent
from agentmill.methods.forensics.config import ForensicsConfig
from agentmill.methods.forensics.dose import DoseFit, dose_response
from agentmill.methods.forensics.envs import ENVS, load_env
from agentmill.methods.forensics.episode import Episode, check_replay, replay, run_episode
from agentmill.methods.forensics.episode_mode import (LMToolAgent, ScriptedExplorer, check_tool_replay,
                                                      replay_tool_episode, run_tool_episode)
from agentmill.methods.forensics.hypotheses import Hypothesis, HypothesisRegistry, RegistryError
from agentmill.methods.forensics.interrogate import belief_test, interrogate
from agentmill.methods.forensics.organism import OrganismAgent, load_agent_organism, validate_agent_organism
from agentmill.methods.forensics.investigate import Investigation, investigate
from agentmill.methods.forensics.planner import Plan, plan
from agentmill.methods.forensics.variables import Arm, Variable
from agentmill.methods.forensics.verdicts import HypothesisVerdict, judge
from agentmill.methods.forensics.workspace import Workspace, WorkspaceError

__all__ = ["ENVS", "Arm", "DoseFit", "Episode", "ForensicsConfig", "Hypothesis", "HypothesisRegistry",
           "HypothesisVerdict", "Investigation", "LMAgent", "LMToolAgent", "OrganismAgent", "Plan", "PlantedAgent",
           "RegistryError", "ScriptedExplorer", "Variable", "Workspace", "WorkspaceError", "belief_test",
           "check_replay", "check_tool_replay", "dose_response", "interrogate", "investigate", "judge",
           "load_agent_organism", "load_env", "plan", "replay", "replay_tool_episode", "run_episode",
           "run_tool_episode", "validate_agent_organism"]
