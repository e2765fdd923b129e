"""Model forensics: find out why an agent did something concerning, with pre-registered, single-variable tests.

Environments with typed variables (:mod:`.envs`), counterfactual replay that changes exactly one thing
(:mod:`.episode`, :mod:`.variables`), a hash-chained hypothesis registry (:mod:`.hypotheses`), power-planned arms
(:mod:`.planner`), dose-response fits (:mod:`.dose`), verdict rules with positive controls (:mod:`.verdicts`), the
investigation loop (:mod:`.investigate`) and interrogation (:mod:`.interrogate`). docs/methods/forensics.md walks
through them.
"""

from agentmill.methods.forensics.agents import LMAgent, PlantedAgent, Step, planted_responder
from agentmill.methods.forensics.config import ForensicsConfig
from agentmill.methods.forensics.dose import DoseFit, dose_response
from agentmill.methods.forensics.envs import ENVS, EnvSpec, load_env
from agentmill.methods.forensics.episode import Episode, OffPolicyRewindError, check_replay, replay, run_episode
from agentmill.methods.forensics.hypotheses import (Hypothesis, HypothesisRegistry, PostDataEditError, Prediction,
                                                    RegistryError, UnfrozenHypothesisError)
from agentmill.methods.forensics.interrogate import PlantedInterrogatee, belief_test, interrogate, keyword_judge
from agentmill.methods.forensics.investigate import Investigation, investigate, mine_hypotheses, run_arm
from agentmill.methods.forensics.planner import Plan, plan
from agentmill.methods.forensics.variables import (Arm, ConfoundedArmError, Intervention, MultiVariableArmError,
                                                   Variable)
from agentmill.methods.forensics.verdicts import HypothesisVerdict, judge

__all__ = ["ENVS", "Arm", "ConfoundedArmError", "DoseFit", "EnvSpec", "Episode", "ForensicsConfig", "Hypothesis",
           "HypothesisRegistry", "HypothesisVerdict", "Intervention", "Investigation", "LMAgent",
           "MultiVariableArmError", "OffPolicyRewindError", "Plan", "PlantedAgent", "PlantedInterrogatee",
           "PostDataEditError", "Prediction", "RegistryError", "Step", "UnfrozenHypothesisError", "Variable",
           "belief_test", "check_replay", "dose_response", "interrogate", "investigate", "judge", "keyword_judge",
           "load_env", "mine_hypotheses", "plan", "planted_responder", "replay", "run_arm", "run_episode"]
