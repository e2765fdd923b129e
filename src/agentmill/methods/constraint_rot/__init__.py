"""ConstraintRot (E164, arXiv:2606.22528): compaction-induced governance decay, Constraint Pinning, eviction attacks.

The public face is the main path of docs/methods/constraint_rot.md ("Use it"): load and instantiate the rule
catalogue, generate episodes, run them under conditions through the agent loop with a scripted actor, and grade.
Everything else is imported from its submodule (``compactors``, ``pinning``, ``attacks``, ``payloads``,
``survival``, ``metrics``, ``organism``, ``frameworks``, …); the package README maps them and their layering.
"""

from agentmill.methods.constraint_rot.actors import (Actor, AlwaysComply, AlwaysRefuse, LatestInstructionWins,
                                                     RuleReader)
from agentmill.methods.constraint_rot.catalogue import Catalogue, RuleInstance, instantiate, load_catalogue
from agentmill.methods.constraint_rot.conditions import (Condition, compacted, full_context, never_stated, pinned,
                                                         rounds)
from agentmill.methods.constraint_rot.generate import LOCATIONS, Episode, generate_episodes
from agentmill.methods.constraint_rot.grader import Outcome, cross_check, grade
from agentmill.methods.constraint_rot.loop import AgentLoop, EpisodeResult, ResultWriter
from agentmill.methods.constraint_rot.schema import RuleFamily

__all__ = [
    # catalogue
    "Catalogue", "RuleFamily", "RuleInstance", "instantiate", "load_catalogue",
    # episodes and conditions
    "LOCATIONS", "Episode", "generate_episodes", "Condition", "compacted", "full_context", "never_stated", "pinned",
    "rounds",
    # the loop, scripted actors and grading
    "AgentLoop", "EpisodeResult", "ResultWriter", "Actor", "AlwaysComply", "AlwaysRefuse", "LatestInstructionWins",
    "RuleReader", "Outcome", "cross_check", "grade",
]
