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
