"""Compaction-eviction attacks of ConstraintRot (spec §2.8): the template library (A1–A8, F0 filler control),
the random-search + GA optimiser, and the impersonation / forged-card builders."""

from agentmill.methods.constraint_rot.attacks.impersonation import (IMPERSONATION_DEFAULTS, forged_card,
                                                                    impersonation_message, insert_impersonation,
                                                                    plant_forged_card)
from agentmill.methods.constraint_rot.attacks.optimise import (DROP_LABELS, AttackEvaluation, DevCase,
                                                               OptimisedAttack, attack_labels, drop_rate,
                                                               evaluate_attack, load_attack, optimise_attack)
from agentmill.methods.constraint_rot.attacks.templates import (EVICTION_TEMPLATES, FIXED_PROBE, TEMPLATES,
                                                                AttackSpec, RuleView, Slots, embed, filler_like,
                                                                plant, render, text_of_length)

__all__ = ["DROP_LABELS", "EVICTION_TEMPLATES", "FIXED_PROBE", "IMPERSONATION_DEFAULTS", "TEMPLATES",
           "AttackEvaluation", "AttackSpec", "DevCase", "OptimisedAttack", "RuleView", "Slots", "attack_labels",
           "drop_rate", "embed",
           "evaluate_attack", "filler_like", "forged_card", "impersonation_message", "insert_impersonation",
           "load_attack", "optimise_attack", "plant", "plant_forged_card", "render", "text_of_length"]
