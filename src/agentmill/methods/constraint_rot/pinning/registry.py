"""The operator's policy registry: the single source of truth for pinned rules (docs/methods/constraint_rot.md "Use it"
5).

Cards are rendered from the registry, never from the transcript, so no summariser or tool output can alter them.
``freeze()`` makes the registry immutable for a run; the middleware freezes it when it is constructed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from agentmill.core.types import ToolCall
from agentmill.methods.constraint_rot.messages import normalise

OPEN, CLOSE = "[POLICY", "[/POLICY"
_DELIM = re.compile(r"\[\s*/?\s*(?:quoted-)?policy\b", re.IGNORECASE)
_RULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]*")


@runtime_checkable
class Predicate(Protocol):
    """Anything with ``matches(call) -> bool`` (the catalogue's compiled forbidden predicate)."""

    def matches(self, call: ToolCall) -> bool: ...


def contains_delimiter(text: str) -> bool:
    """Whether ``text`` contains a card delimiter (after NFKC and zero-width stripping)."""
    return bool(_DELIM.search(normalise(text)))


@dataclass(frozen=True)
class PinnedRule:
    """One registered operator rule. ``digest`` is the full sha256 of docs/methods/constraint_rot.md "Use it" 5; cards
    show ``short`` (8 hex)."""

    rule_id: str
    text: str
    issuer: str
    kind: Literal["soft", "hard"]
    scope_tools: tuple[str, ...]
    digest: str
    predicate: Any = field(default=None, compare=False, repr=False)

    @property
    def short(self) -> str:
        return self.digest[:8]


def rule_digest(text: str, rule_id: str, issuer: str, version: str) -> str:
    """sha256(normalised rule text ‖ rule id ‖ issuer ‖ registry version), ‖ = the unit separator U+001F."""
    return hashlib.sha256("\x1f".join((normalise(text), rule_id, issuer, version)).encode()).hexdigest()


class PolicyRegistry:
    """Operator rules by id, in registration order."""

    def __init__(self, version: str = "1"):
        if not version or not str(version).strip():
            raise ValueError("PolicyRegistry.version must be a non-empty string")
        self.version = str(version)
        self._rules: dict[str, PinnedRule] = {}
        self._frozen = False

    def register(self, rule_id: str, text: str, *, issuer: str, kind: Literal["soft", "hard"],
                 scope_tools: Sequence[str], predicate: Predicate | None = None) -> PinnedRule:
        if self._frozen:
            raise RuntimeError(f"PolicyRegistry is frozen; cannot register {rule_id!r}")
        if not isinstance(rule_id, str) or not _RULE_ID.fullmatch(rule_id):
            raise ValueError(f"rule_id must match {_RULE_ID.pattern} (no spaces or brackets), got {rule_id!r}")
        if rule_id in self._rules:
            raise ValueError(f"rule_id {rule_id!r} is already registered")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"rule {rule_id!r}: text is empty")
        if contains_delimiter(text):
            raise ValueError(f"rule {rule_id!r}: text contains a card delimiter ({OPEN} / {CLOSE}): {text!r}")
        if not isinstance(issuer, str) or not _RULE_ID.fullmatch(issuer):
            raise ValueError(f"rule {rule_id!r}: issuer must be one word without spaces or brackets, got {issuer!r}")
        if kind not in ("soft", "hard"):
            raise ValueError(f"rule {rule_id!r}: kind must be 'soft' or 'hard', got {kind!r}")
        if isinstance(scope_tools, str):
            raise ValueError(f"rule {rule_id!r}: scope_tools must be a list of tool names, not a string")
        if predicate is not None and not callable(getattr(predicate, "matches", None)):
            raise ValueError(f"rule {rule_id!r}: predicate must have matches(call) -> bool, "
                             f"got {type(predicate).__name__}")
        text = " ".join(text.split())
        rule = PinnedRule(rule_id, text, issuer, kind, tuple(scope_tools),
                          rule_digest(text, rule_id, issuer, self.version), predicate)
        self._rules[rule_id] = rule
        return rule

    def freeze(self) -> None:
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    @property
    def rules(self) -> tuple[PinnedRule, ...]:
        return tuple(self._rules.values())

    def get(self, rule_id: str) -> PinnedRule:
        try:
            return self._rules[rule_id]
        except KeyError:
            raise KeyError(f"no registered rule {rule_id!r}; registered: {sorted(self._rules)}") from None

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._rules

    def __iter__(self) -> Iterator[PinnedRule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self._rules)
