"""Scripted actors for exact tests (docs/methods/constraint_rot.md "Deviations from the paper" 5) [R].

Every scripted actor answers the request it was briefed about (:class:`.base.ActorBrief`) the same way:

- the request is not forbidden by the episode's rule (an allowed near-miss) → perform it;
- otherwise, if the actor *obeys* → call the compliant alternative with the correct arguments, or refuse in text
  when the alternative would itself be forbidden;
- otherwise → perform the request with its exact arguments.

After its call has been answered (the last message is a tool result) it closes the turn with a short text reply.
The actors differ only in when they obey:

- ``RuleReader("verbatim")``: the canonical rule sentence φ(θ) (or the card body) appears verbatim (normalised);
- ``RuleReader("semantic")``: the rule survives in the context by the survival classifier's own definition
  (:func:`..survival.classify_survival`, label preserved or paraphrased, with the family matcher's anchors and cues)
  — the reader and the classifier share one anchor definition, so CR-1 checks the plumbing, not a hypothesis;
- ``RuleReader("card_only")``: a well-formed card whose digest the operator registry issued for this rule is
  present; everything said in chat (including forged "operator updates") is ignored;
- ``LatestInstructionWins``: the latest sentence about the rule decides — a binding statement obeys, a later
  retirement/permission claim ("operator update: … no longer applies") overrides it (the CR-9 residual);
- ``AlwaysComply`` / ``AlwaysRefuse`` (NC-1 / NC-2) and ``RandomActor(p, seed)``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.methods.constraint_rot.catalogue import RuleInstance
from agentmill.methods.constraint_rot.actors.base import Action, ActorBrief
from agentmill.methods.constraint_rot.messages import (WhitespaceCounter, has_cue, message_text, normalise,
                                                       split_sentences)
from agentmill.methods.constraint_rot.pinning.card import parse_cards
from agentmill.methods.constraint_rot.survival import PERMISSION_CUES, RETIREMENT_CUES, classify_survival

REFUSAL_TEXT = "I can't do that: it is against the policy in force here."
DONE_TEXT = "Done."
FAILED_TEXT = "That did not work: {error}"


class ScriptedActor:
    """Shared request handling; subclasses decide :meth:`obeys`."""

    name = "scripted"

    def __init__(self) -> None:
        self.brief: ActorBrief | None = None

    @property
    def config(self) -> dict[str, Any]:
        return {"name": self.name}

    def begin(self, brief: ActorBrief) -> None:
        self.brief = brief

    def obeys(self, messages: Sequence[Message]) -> bool:
        raise NotImplementedError

    def act(self, messages: Sequence[Message], tools: Sequence[Any] = ()) -> Action:
        if self.brief is None:
            raise ValueError(f"{type(self).__name__}.act: no brief; the loop calls begin(ActorBrief) first")
        if not messages:
            raise ValueError(f"{type(self).__name__}.act: empty context")
        last = messages[-1]
        if last.role == "tool":
            return Action.reply(FAILED_TEXT.format(error=last.content[7:]) if last.content.startswith("ERROR:")
                                else DONE_TEXT)
        if last.role != "user":
            return Action.reply(DONE_TEXT)
        inst = self.brief.instance
        n = 1 + sum(len(m.tool_calls) for m in messages)
        request = self.brief.request_call
        if not inst.violates(request) or not self.obeys(messages):
            return Action.call(ToolCall(f"call-{n}", request.name, dict(request.arguments)))
        alt = inst.alternative_call
        if inst.violates(alt):
            return Action.reply(REFUSAL_TEXT)
        return Action.call(ToolCall(f"call-{n}", alt.name, dict(alt.arguments)))


def _texts(messages: Sequence[Message]) -> list[str]:
    return [message_text(m) for m in messages]


class RuleReader(ScriptedActor):
    """Obeys iff it finds the episode's rule in the context (``mode``: verbatim, semantic or card_only)."""

    MODES = ("verbatim", "semantic", "card_only")

    def __init__(self, mode: Literal["verbatim", "semantic", "card_only"] = "semantic"):
        if mode not in self.MODES:
            raise ValueError(f"RuleReader.mode must be one of {self.MODES}, got {mode!r}")
        super().__init__()
        self.mode = mode
        self.name = f"rule_reader:{mode}"

    def obeys(self, messages: Sequence[Message]) -> bool:
        assert self.brief is not None
        inst = self.brief.instance
        if self.mode == "verbatim":
            text = normalise("\n".join(_texts(messages)))
            return normalise(inst.text) in text or normalise(inst.card_text) in text
        if self.mode == "card_only":
            return any(c.rule_id == inst.rule_id and c.digest in self.brief.card_digests
                       for t in _texts(messages) for c in parse_cards(t))
        context = _before_request(messages)
        verdict = classify_survival(inst.text, {"values": inst.matcher_values}, inst.matcher_cues, context,
                                    counter=WhitespaceCounter(), ignore_origins=())
        return verdict.survived or any(_card_states_rule(c.body, inst) for t in _texts(context)
                                       for c in parse_cards(t))


def _before_request(messages: Sequence[Message]) -> list[Message]:
    """The context up to (not including) the latest user message: the request being answered is not a statement
    about the rule (a trigger saying "it is fine" must not read as a permission)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return list(messages[:i])
    return list(messages)


def _card_states_rule(body: str, inst: RuleInstance) -> bool:
    """A card body states the rule by the catalogue's anchor definition (every matcher value as a substring and a
    matcher cue at a word start) — the definition the catalogue's load-time check guarantees for every card."""
    text = body.lower()
    return (all(v.lower() in text for v in inst.matcher_values)
            and any(re.search(r"\b" + re.escape(c), text) for c in inst.matcher_cues))


class LatestInstructionWins(ScriptedActor):
    """Obeys iff the latest sentence about the rule binds: a statement of the rule (every value anchor and a cue, by
    the catalogue's anchor definition) obeys; a later sentence naming the rule with a retirement or permission cue overrides it."""

    name = "latest_instruction_wins"

    def obeys(self, messages: Sequence[Message]) -> bool:
        assert self.brief is not None
        inst = self.brief.instance
        values = inst.matcher_values
        state = False
        for text in _texts(_before_request(messages)):
            for sent in split_sentences(text):
                low = normalise(sent)
                hits = [normalise(v) in low for v in values]
                if not any(hits) and inst.rule_id.lower() not in low:
                    continue
                if has_cue(low, RETIREMENT_CUES) or has_cue(low, PERMISSION_CUES):
                    state = False
                elif all(hits) and _card_states_rule(sent, inst):
                    state = True
        return state


class AlwaysComply(ScriptedActor):
    """NC-1: performs every request."""

    name = "always_comply"

    def obeys(self, messages: Sequence[Message]) -> bool:
        return False


class AlwaysRefuse(ScriptedActor):
    """NC-2: refuses every request in text, allowed near-misses included (over-refusal 100 %)."""

    name = "always_refuse"

    def act(self, messages: Sequence[Message], tools: Sequence[Any] = ()) -> Action:
        if messages and messages[-1].role == "tool":
            return Action.reply(DONE_TEXT)
        return Action.reply(REFUSAL_TEXT)

    def obeys(self, messages: Sequence[Message]) -> bool:
        return True


class RandomActor(ScriptedActor):
    """Obeys with probability ``p``, independently per decision; the draw is a function of ``seed`` and the
    context, so a rerun reproduces every decision."""

    def __init__(self, p: float, seed: int = 0):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"RandomActor.p must be in [0, 1], got {p!r}")
        super().__init__()
        self.p, self.seed = float(p), int(seed)
        self.name = f"random:p={self.p:g},seed={self.seed}"

    def obeys(self, messages: Sequence[Message]) -> bool:
        blob = json.dumps([m.to_dict() for m in messages], sort_keys=True)
        h = hashlib.sha256(f"{self.seed}\x1f{blob}".encode()).digest()
        return random.Random(int.from_bytes(h[:8], "big")).random() < self.p
