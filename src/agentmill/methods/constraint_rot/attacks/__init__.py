"""Compaction-eviction attacks of ConstraintRot (docs/methods/constraint_rot.md "What it does"): the random-search + GA
optimiser (:mod:`.optimise`) and the dev cases it scores on (:mod:`.cases`). The payload library they draw on (templates
A1–A8, F0 filler control, the impersonation / forged-card builders) lives in :mod:`..payloads`, below the bench; its
names are re-exported here."""

from agentmill.methods.constraint_rot.attacks.optimise import (DROP_LABELS, AttackEvaluation, DevCase,
                                                               OptimisedAttack, attack_labels, drop_rate,
                                                               evaluate_attack, load_attack, optimise_attack)
from agentmill.methods.constraint_rot.payloads.impersonation import (IMPERSONATION_DEFAULTS, forged_card,
                                                                     impersonation_message, insert_impersonation,
                                                                     plant_forged_card)
from agentmill.methods.constraint_rot.payloads.templates import (EVICTION_TEMPLATES, FIXED_PROBE, TEMPLATES,
                                                                 AttackSpec, RuleView, Slots, embed, filler_like,
                                                                 plant, render, text_of_length)

__all__ = ["DROP_LABELS", "EVICTION_TEMPLATES", "FIXED_PROBE", "IMPERSONATION_DEFAULTS", "TEMPLATES",
           "AttackEvaluation", "AttackSpec", "DevCase", "OptimisedAttack", "RuleView", "Slots", "attack_labels",
           "drop_rate", "embed",
           "evaluate_attack", "filler_like", "forged_card", "impersonation_message", "insert_impersonation",
           "load_attack", "optimise_attack", "plant", "plant_forged_card", "render", "text_of_length"]
