"""The attack payload library of ConstraintRot: templates A1–A8 and the F0 filler control (:mod:`.templates`), and
the A8 impersonation / A7 forged-card builders (:mod:`.impersonation`). It sits below the bench, so that
:mod:`..generate` can embed an attack, and below :mod:`..attacks`, which optimises payloads and re-exports these
names (docs/methods/constraint_rot.md, "Use it"; the package README, "Layering")."""

from agentmill.methods.constraint_rot.payloads.impersonation import (IMPERSONATION_DEFAULTS, forged_card,
                                                                     impersonation_message, insert_impersonation,
                                                                     plant_forged_card)
from agentmill.methods.constraint_rot.payloads.templates import (EVICTION_TEMPLATES, FIXED_PROBE, TEMPLATES,
                                                                 AttackSpec, RuleView, Slots, embed, filler_like,
                                                                 plant, render, text_of_length)

__all__ = ["EVICTION_TEMPLATES", "FIXED_PROBE", "IMPERSONATION_DEFAULTS", "TEMPLATES", "AttackSpec", "RuleView",
           "Slots", "embed", "filler_like", "forged_card", "impersonation_message", "insert_impersonation",
           "plant", "plant_forged_card", "render", "text_of_length"]
