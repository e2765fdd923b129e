"""PolicyGate: a deterministic tool-call check against the registry's predicates (docs/methods/constraint_rot.md
"Use it" 5) [R].

Defence in depth: it evaluates each registered rule's forbidden predicate on a proposed call *before* execution
and blocks it with a tool error naming the rule. Behaviour under the gate no longer depends on the model reading
the card, so it is the only arm that closes the impersonation hole; violations under it are 0 by construction and
are reported as such, never as evidence that pinning works.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentmill.core.types import ToolCall
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry


@dataclass(frozen=True)
class GateDecision:
    """``allowed`` or blocked by ``rule_id``; ``error`` is the tool error text the agent sees when blocked."""

    allowed: bool
    rule_id: str | None = None
    error: str | None = None


@dataclass
class PolicyGate:
    """Checks calls against every registered rule that has a predicate and governs the call's tool (a rule with
    no ``scope_tools`` governs every tool). ``log`` keeps every blocked decision."""

    registry: PolicyRegistry
    log: list[tuple[ToolCall, GateDecision]] = field(default_factory=list)

    def check(self, call: ToolCall) -> GateDecision:
        if not isinstance(call, ToolCall):
            raise ValueError(f"PolicyGate.check expects a ToolCall, got {type(call).__name__}")
        for rule in self.registry:
            if rule.predicate is None or (rule.scope_tools and call.name not in rule.scope_tools):
                continue
            if rule.predicate.matches(call):
                decision = GateDecision(False, rule.rule_id,
                                        f"blocked by policy {rule.rule_id}: {rule.text}")
                self.log.append((call, decision))
                return decision
        return GateDecision(True)
