"""Constraint Pinning (docs/methods/constraint_rot.md "Use it" 5): operator registry, rule cards, the pinning middleware
and the policy gate."""

from agentmill.methods.constraint_rot.pinning.card import (FOOTER, CardTooLong, ParsedCard, RuleCard, parse_cards,
                                                          render_card, strip_cards)
from agentmill.methods.constraint_rot.pinning.gate import GateDecision, PolicyGate
from agentmill.methods.constraint_rot.pinning.middleware import (PinEvent, PinIntegrityError, PinningMiddleware,
                                                                PinReport, Placement)
from agentmill.methods.constraint_rot.pinning.registry import PinnedRule, PolicyRegistry, Predicate, rule_digest

__all__ = ["FOOTER", "CardTooLong", "GateDecision", "ParsedCard", "PinEvent", "PinIntegrityError", "PinReport",
           "PinnedRule", "PinningMiddleware", "Placement", "PolicyGate", "PolicyRegistry", "Predicate", "RuleCard",
           "parse_cards", "render_card", "rule_digest", "strip_cards"]
