"""Constraint Pinning middleware (docs/methods/constraint_rot.md "Use it" 5): strip, re-insert, verify, sanitise,
report.

- ``after_compaction(messages)``: strip every card-shaped block, then insert one fresh card per registered rule at
  the configured placement.
- ``before_model(messages)``: sanitise untrusted content, then verify that exactly one card per rule is present
  with the registry's digest and body; on a mismatch ``repair`` (strip and re-insert), ``raise``
  (:class:`PinIntegrityError`) or ``warn`` (pass the context through unchanged, with a warning).
- ``sanitize(text)``: rewrite card delimiters in untrusted text (``[POLICY`` → ``[quoted-POLICY``), so a forged
  card in a tool output is inert text; small actors cannot verify digests, so this is what stops forged cards.

Trust: tool messages are untrusted unless labelled ``trusted=True``; any message labelled ``trusted=False`` is
untrusted, *except* harness summaries (``origin="summary"``), whose card-shaped blocks are copies a summariser made
and are stripped, not counted as forgeries. Cards are messages labelled ``origin="card"`` (or, with placement
``system``, blocks appended to the system message).

The fast path of ``before_model`` on an intact context is a substring scan plus a dictionary check per card; the
token counts of the cards are computed once, at construction (PF-1: ≤ 100 µs per call on 200 messages).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.messages import ZERO_WIDTH, is_untrusted, origin, strip_zero_width
from agentmill.methods.constraint_rot.pinning.card import FOOTER, RuleCard, parse_cards, render_card, strip_cards
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry

Placement = Literal["after_summary", "system", "before_last_user", "end"]
PLACEMENTS = ("after_summary", "system", "before_last_user", "end")
VERIFY = ("repair", "raise", "warn")

# Delimiters as an actor might read them: any case, zero-width characters allowed between the letters.
_ZW = f"[{ZERO_WIDTH}]*"
_FORGE = re.compile(r"\[" + _ZW + r"(/?)" + _ZW + _ZW.join("POLICY"), re.IGNORECASE)


class PinIntegrityError(RuntimeError):
    """The cards in a model input do not match the registry (``verify="raise"``)."""

    def __init__(self, status: dict[str, str]):
        self.status = status
        bad = {k: v for k, v in status.items() if v != "ok"}
        super().__init__(f"pinned cards do not match the registry: {bad}")


@dataclass(frozen=True)
class PinEvent:
    """One middleware call."""

    hook: Literal["after_compaction", "before_model"]
    placement: str
    cards_present: int
    card_tokens: int
    tokens_added: int
    digest_status: dict[str, str]
    action: Literal["none", "inserted", "repaired", "raised", "warned"]
    forged_attempts: int


@dataclass
class PinReport:
    """Per-call events plus running totals."""

    placement: str
    events: list[PinEvent] = field(default_factory=list)
    compaction_events: int = 0
    model_calls: int = 0
    forged_attempts: int = 0
    repairs: int = 0
    tokens_added: int = 0

    @property
    def last(self) -> PinEvent | None:
        return self.events[-1] if self.events else None


class _Scan(NamedTuple):
    message: Message
    forged: bool
    cards: tuple[tuple[str, str, str], ...]


class PinningMiddleware:
    """Keep one registry-rendered card per rule in every model input."""

    def __init__(self, registry: PolicyRegistry, *, placement: Placement = "after_summary",
                 verify: Literal["repair", "raise", "warn"] = "repair", sanitize_untrusted: bool = True,
                 counter: Any = None, max_tokens: int = 60, card_role: Literal["user", "system"] = "user"):
        if placement not in PLACEMENTS:
            raise ValueError(f"PinningMiddleware.placement must be one of {PLACEMENTS}, got {placement!r}")
        if verify not in VERIFY:
            raise ValueError(f"PinningMiddleware.verify must be one of {VERIFY}, got {verify!r}")
        if card_role not in ("user", "system"):
            raise ValueError(f"PinningMiddleware.card_role must be 'user' or 'system', got {card_role!r}")
        if len(registry) == 0:
            raise ValueError("PinningMiddleware: the registry has no rules")
        registry.freeze()
        self.registry, self.placement, self.verify = registry, placement, verify
        self.sanitize_untrusted, self.card_role = sanitize_untrusted, card_role
        self.cards: dict[str, RuleCard] = {r.rule_id: render_card(r, counter, max_tokens=max_tokens)
                                           for r in registry}
        self._bodies = {r.rule_id: f"{r.text}\n{FOOTER}" for r in registry}
        self.card_tokens = sum(c.n_tokens for c in self.cards.values())
        self.report = PinReport(placement=placement)
        self._cache: dict[int, tuple[Message, _Scan]] = {}

    # ------------------------------------------------------------------------------------------------ hooks
    def after_compaction(self, messages: list[Message]) -> list[Message]:
        """Strip every card-shaped block, sanitise untrusted content, insert fresh cards at the placement."""
        clean, forged = self._scan_all(messages)
        out = self._insert(self._strip(clean))
        self.report.compaction_events += 1
        self._log("after_compaction", self.status(out), tokens_added=self.card_tokens, action="inserted",
                  forged=forged)
        return out

    def before_model(self, messages: list[Message]) -> list[Message]:
        """Verify the cards (after sanitising untrusted content) and act per ``verify``."""
        self.report.model_calls += 1
        clean, forged = self._scan_all(messages)
        status = self._status_of(clean)
        if all(v == "ok" for v in status.values()):
            self._log("before_model", status, tokens_added=0, action="none", forged=forged)
            return clean
        bad = {k: v for k, v in status.items() if v != "ok"}
        if self.verify == "raise":
            self._log("before_model", status, tokens_added=0, action="raised", forged=forged)
            raise PinIntegrityError(status)
        if self.verify == "warn":
            warnings.warn(f"pinned cards do not match the registry: {bad}", stacklevel=2)
            self._log("before_model", status, tokens_added=0, action="warned", forged=forged)
            return clean
        out = self._insert(self._strip(clean))
        self.report.repairs += 1
        self._log("before_model", self.status(out), tokens_added=self.card_tokens, action="repaired",
                  forged=forged, before=status)
        return out

    def sanitize(self, text: str) -> tuple[str, bool]:
        """(text with card delimiters quoted, whether any were found). Text without delimiters is returned as is;
        text with them also loses its zero-width characters, so delimiters hidden with them are quoted too."""
        if "[" not in text:
            return text, False
        probe = strip_zero_width(text)
        if not _FORGE.search(probe):
            return text, False
        return _FORGE.sub(lambda m: f"[{m.group(1)}quoted-POLICY", probe), True

    # ------------------------------------------------------------------------------------------- inspection
    def status(self, messages: list[Message]) -> dict[str, str]:
        """Per registered rule: ``ok``, ``missing``, ``duplicate`` or ``tampered``; plus ``unknown:<id>`` entries
        (always ``tampered``) for card blocks naming rules the registry does not hold. Card blocks inside untrusted
        messages (other than summaries) are not cards and are not counted."""
        return self._status_of([self._scan(m)[0] for m in messages])

    # -------------------------------------------------------------------------------------------- internals
    @staticmethod
    def _untrusted(m: Message) -> bool:
        """Untrusted content whose delimiters are quoted rather than counted (summaries are stripped instead)."""
        return is_untrusted(m) and origin(m) not in ("card", "summary")

    def _scan(self, m: Message) -> _Scan:
        """Sanitised message, forged flag, card blocks counted in it; memoised by identity (messages are
        immutable), which keeps ``before_model`` on an unchanged 200-message context to dictionary lookups."""
        hit = self._cache.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        clean, forged = m, False
        if self.sanitize_untrusted and self._untrusted(m) and "[" in m.content:
            text, forged = self.sanitize(m.content)
            if forged:
                clean = replace(m, content=text, meta={**m.meta, "forged_card": True})
        cards: tuple[tuple[str, str, str], ...] = ()
        if not self._untrusted(clean) and "[POLICY" in clean.content:
            cards = tuple((c.rule_id, c.digest, c.body) for c in parse_cards(clean.content))
        if origin(clean) == "card" and not cards:
            cards = (("<malformed>", "", clean.content),)
        scan = _Scan(clean, forged, cards)
        self._cache[id(m)] = (m, scan)
        if clean is not m:
            self._cache[id(clean)] = (clean, _Scan(clean, False, cards))
        return scan

    def _scan_all(self, messages: list[Message]) -> tuple[list[Message], int]:
        scans = [self._scan(m) for m in messages]
        if len(self._cache) > 4 * len(messages) + 64:  # forget messages no longer in any context
            self._cache = {id(s.message): (s.message, s) for s in scans}
        forged = sum(s.forged for s in scans)
        self.report.forged_attempts += forged
        return [s.message for s in scans], forged

    def _status_of(self, clean: list[Message]) -> dict[str, str]:
        found: dict[str, list[tuple[str, str]]] = {}
        for m in clean:
            for rid, digest, body in self._scan(m).cards:
                found.setdefault(rid, []).append((digest, body))
        status: dict[str, str] = {}
        for rid, card in self.cards.items():
            hits = found.pop(rid, [])
            if not hits:
                status[rid] = "missing"
            elif len(hits) > 1:
                status[rid] = "duplicate"
            elif hits[0] != (card.digest, self._bodies[rid]):
                status[rid] = "tampered"
            else:
                status[rid] = "ok"
        for rid in found:
            status[f"unknown:{rid}"] = "tampered"
        return status

    def _strip(self, messages: list[Message]) -> list[Message]:
        out = []
        for m in messages:
            if origin(m) == "card":
                continue
            if "[POLICY" in m.content and not self._untrusted(m):
                text, n = strip_cards(m.content)
                if n:
                    m = replace(m, content=text, meta={k: v for k, v in m.meta.items() if k != "cards"})
            out.append(m)
        return out

    def _card_messages(self) -> list[Message]:
        return [Message(role=self.card_role, content=c.text,
                        meta={"origin": "card", "trusted": True, "rule_id": rid}) for rid, c in self.cards.items()]

    def _insert(self, messages: list[Message]) -> list[Message]:
        msgs = list(messages)
        if self.placement == "system":
            block = "\n".join(c.text for c in self.cards.values())
            if msgs and msgs[0].role == "system":
                first = msgs[0]
                msgs[0] = replace(first, content=f"{first.content}\n\n{block}" if first.content else block,
                                  meta={**first.meta, "cards": list(self.cards)})
                return msgs
            return [Message(role="system", content=block, meta={"origin": "card", "trusted": True})] + msgs
        if self.placement == "end":
            return msgs + self._card_messages()
        if self.placement == "before_last_user":
            users = [i for i, m in enumerate(msgs) if m.role == "user" and origin(m) not in ("summary", "card")]
            at = users[-1] if users else len(msgs)
        else:  # after_summary: right after the last summary message, else after the leading system messages
            summaries = [i for i, m in enumerate(msgs) if origin(m) == "summary"]
            if summaries:
                at = summaries[-1] + 1
            else:
                at = 0
                while at < len(msgs) and msgs[at].role == "system":
                    at += 1
        return msgs[:at] + self._card_messages() + msgs[at:]

    def _log(self, hook: Any, status: dict[str, str], *, tokens_added: int, action: Any, forged: int,
             before: dict[str, str] | None = None) -> None:
        ok = [rid for rid in self.cards if status.get(rid) == "ok"]
        self.report.tokens_added += tokens_added
        self.report.events.append(PinEvent(hook, self.placement, len(ok),
                                           sum(self.cards[r].n_tokens for r in ok), tokens_added,
                                           before if before is not None else status, action, forged))
