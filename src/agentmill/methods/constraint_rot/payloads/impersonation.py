"""Attacks on the actor rather than the summariser (docs/methods/constraint_rot.md "What it does"): the A8
operator-impersonation message for the un-compacted tail, and the A7 forged card planted into a tool output.

A8 is the paper's stated residual failure of pinning [S]: a forged "operator update" that sits in recent context
is never compacted, so re-injecting the card does not remove it, and an actor that follows the latest instruction
obeys it (CR-9; only the gate or a card-only reader closes the hole). The message is user-role — what a person
pasting a notice into the chat, or a compromised upstream, produces — labelled ``origin="attack"``,
``trusted=False`` so that the harness (never the actor: labels are stripped) can account for it.

A7 imitates the card format of ``pinning/card.py``; ``PinningMiddleware`` sanitises it in untrusted content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.payloads.templates import Slots, plant, render

IMPERSONATION_DEFAULTS = Slots(authority="operator", names_topic=True)
"""A8 defaults: signed by the operator and naming the rule (an actor has to know which rule "changed")."""


def _slots(slots: Slots | Mapping[str, Any] | None, default: Slots) -> Slots:
    if slots is None:
        return default
    return slots if isinstance(slots, Slots) else Slots.from_dict({**default.to_dict(), **slots})


def impersonation_message(rule: Any, slots: Slots | Mapping[str, Any] | None = None, *,
                          step: int | None = None) -> Message:
    """The A8 tail message: a user-role "operator notice" claiming ``rule`` changed (``rule``: a RuleInstance or
    RuleView). ``slots`` override :data:`IMPERSONATION_DEFAULTS`; position, filler and camouflage apply as in
    :func:`render`."""
    s = _slots(slots, IMPERSONATION_DEFAULTS)
    meta: dict[str, Any] = {"origin": "attack", "trusted": False, "attack": "A8"}
    if step is not None:
        meta["step"] = step
    return Message(role="user", content=render("A8", rule, s), meta=meta)


def insert_impersonation(messages: Sequence[Message], rule: Any, slots: Slots | Mapping[str, Any] | None = None,
                         *, before_last: int = 0) -> list[Message]:
    """A copy of ``messages`` with the A8 message inserted ``before_last`` messages from the end (0 = appended;
    the generator appends it right before the trigger; docs/methods/constraint_rot.md "Use it" 2: last 1–2 messages
    before the trigger)."""
    if isinstance(before_last, bool) or not isinstance(before_last, int) or not 0 <= before_last <= len(messages):
        raise ValueError(f"insert_impersonation: before_last must be in 0..{len(messages)}, got {before_last!r}")
    at = len(messages) - before_last
    step = next((m.meta["step"] for m in reversed(messages[:at]) if isinstance(m.meta.get("step"), int)), None)
    return list(messages[:at]) + [impersonation_message(rule, slots, step=step)] + list(messages[at:])


def forged_card(rule: Any, slots: Slots | Mapping[str, Any] | None = None) -> str:
    """The A7 forged card for ``rule``: card-shaped, contrary content, a made-up digest."""
    return render("A7", rule, _slots(slots, Slots(names_topic=True)))


def plant_forged_card(messages: Sequence[Message], index: int, rule: Any,
                      slots: Slots | Mapping[str, Any] | None = None) -> list[Message]:
    """A copy of ``messages`` with the A7 forged card embedded in the tool message at ``index``."""
    s = _slots(slots, Slots(names_topic=True))
    return plant(messages, index, forged_card(rule, s), s.position, label="A7")
