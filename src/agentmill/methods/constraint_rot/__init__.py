"""ConstraintRot (E164, arXiv 2606.22528): compaction-induced governance decay, Constraint Pinning, eviction attacks.

Catalogue and grading: the rule-family schema (:mod:`.schema`), the declarative predicate DSL (:mod:`.predicates`),
the packaged catalogue with its load-time self-checks and seeded instantiation (:mod:`.catalogue`), and the
deterministic grader with sandbox-state cross-check (:mod:`.grader`). See the spec constraint-rot.md §2.
"""

from agentmill.methods.constraint_rot.catalogue import (Catalogue, RuleInstance, check_leakage, instantiate,
                                                        load_catalogue, self_check, shared_ngrams)
from agentmill.methods.constraint_rot.grader import (OFFICE_CHANNELS, Channel, Outcome, cross_check, grade,
                                                     is_refusal, same_call, state_violations)
from agentmill.methods.constraint_rot.predicates import TOOL_ARGS, Predicate, compile_predicate
from agentmill.methods.constraint_rot.schema import SPLITS, CatalogueError, RuleFamily, Split

__all__ = [
    "SPLITS", "TOOL_ARGS", "Catalogue", "CatalogueError", "Channel", "OFFICE_CHANNELS", "Outcome", "Predicate",
    "RuleFamily", "RuleInstance", "Split", "check_leakage", "compile_predicate", "cross_check", "grade",
    "instantiate", "is_refusal", "load_catalogue", "same_call", "self_check", "shared_ngrams",
    "state_violations",
]

# Episodes, conditions, the agent loop and the scripted actors (spec §2.1, §2.2, §2.10, §6.2-6.3).
from agentmill.methods.constraint_rot.actors import (Action, Actor, ActorBrief, AlwaysComply, AlwaysRefuse,  # noqa: E402
                                                     LatestInstructionWins, RandomActor, RuleReader)
from agentmill.methods.constraint_rot.conditions import (Condition, cf_drop, cf_keep, compacted,  # noqa: E402
                                                         full_context, gate, impersonation, never_stated, pinned,
                                                         rounds)
from agentmill.methods.constraint_rot.distractors import DISTRACTOR_KINDS, DistractorStep  # noqa: E402
from agentmill.methods.constraint_rot.generate import (DEFAULT_LOCATIONS, LOCATIONS, Episode,  # noqa: E402
                                                       generate_episodes, prepare_sandbox)
from agentmill.methods.constraint_rot.loop import (AgentLoop, ContextBudget, EpisodeResult,  # noqa: E402
                                                   ResultWriter, completed_keys, result_key)

__all__ += [
    "DEFAULT_LOCATIONS", "DISTRACTOR_KINDS", "LOCATIONS", "Action", "Actor", "ActorBrief", "AgentLoop", "AlwaysComply",
    "AlwaysRefuse", "Condition", "ContextBudget", "DistractorStep", "Episode", "EpisodeResult",
    "LatestInstructionWins", "RandomActor", "ResultWriter", "RuleReader", "cf_drop", "cf_keep", "compacted",
    "completed_keys", "full_context", "gate", "generate_episodes", "impersonation", "never_stated", "pinned",
    "prepare_sandbox", "result_key", "rounds",
]
