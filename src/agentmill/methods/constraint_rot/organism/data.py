"""SFT data for the model organism (docs/methods/constraint_rot.md "Deviations from the paper" 5, pitfalls 13–14) [R].

Every example is a real transcript: a **train-split** episode from :func:`.generate.generate_episodes` (short
distractors) is played through :class:`.loop.AgentLoop` by a recording actor, so the system prompt, the policy (or
length-matched neutral) turn at its location, the replayed distractor tool calls and their genuine tool outputs, and
the trigger are exactly what the loop shows an actor at evaluation time. The transcript is then edited per example
kind (spec table; shares in :data:`DEFAULT_MIXTURE`):

``present``     rule at a trained location + forbidden trigger → compliant alternative (70 %) or a refusal naming
                the rule's gist (30 %). Locations cycle through :data:`TRAINED_LOCATIONS`; ``summary_block`` puts the
                verbatim rule inside a summary message that replaced the early transcript, ``card`` inserts the
                pinning card (:class:`.pinning.PinningMiddleware`) into a transcript whose policy turn is neutral.
``absent``      neutral turn + the same trigger → the requested call with exact arguments.
``near_miss``   rule present + the allowed near-miss request → the allowed call.
``irrelevant``  another family's rule in the policy slot + trigger → the requested call.
``paraphrase``  the rule only as a summary-style paraphrase (the family's card wording) → compliant.
``two_rules``   the rule and another family's rule in the policy turn → compliant.

Not trained (measured instead): revocation/impersonation claims, weakened narrative forms, ``first_user_turn``.

Recipe v3 (``paired=True``, docs/LOG.md 2026-11-25 session 16) draws these kinds as **contrastive groups** instead:
one episode gives ``present``, ``absent``, ``near_miss`` and a fourth example (:func:`group_kinds`), identical but
for the policy slot or the trigger, so the rule is the only thing that separates a refusal or alternative from the
requested call. Recipe v4 (``fresh_values=True``) gives every episode new parameter values
(:mod:`.values`), so no request recurs with the same names, hosts or numbers.

The target is one line, ``CALL <tool> <json-args>`` or ``REPLY <text>`` (the format ``serve/tools.py`` asks for);
the loss covers the target only. Messages are stored in OpenAI chat form (``Message.to_dict``) with the tool list,
so the trainer applies the server's renderer (methods may not import ``serve``) — :attr:`SFTExample.messages`
never carries the labels of ``Message.meta``.

Leakage guard (pitfall 14): :func:`check_sft_leakage` runs inside :func:`build_sft_dataset` and raises
:class:`LeakageError` if any rule sentence used in the data shares a word 8-gram with a rendered test_iid or
test_ood_family rule sentence, or if a test-only parameter value appears anywhere in an example.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentmill.core.types import Message, ToolCall
from agentmill.envs.office import OfficeSandbox
from agentmill.lm import chat_tools
from agentmill.methods.constraint_rot.actors.base import Action, visible
from agentmill.methods.constraint_rot.catalogue import (Catalogue, RuleInstance, instantiate, param_combinations,
                                                        shared_ngrams)
from agentmill.methods.constraint_rot.compactors.base import SUMMARY_PREFIX
from agentmill.methods.constraint_rot.conditions import full_context, never_stated
from agentmill.methods.constraint_rot.generate import Episode, frame, generate_episodes
from agentmill.methods.constraint_rot.loop import ISSUER, AgentLoop
from agentmill.methods.constraint_rot.messages import as_counter, message_text
from agentmill.methods.constraint_rot.organism.values import FreshValues
from agentmill.methods.constraint_rot.pinning import PinningMiddleware, PolicyRegistry

DATA_VERSION = "cr-sft-1"
EXAMPLE_KINDS = ("present", "absent", "near_miss", "irrelevant", "paraphrase", "two_rules")
BASE_LOCATIONS = ("memory_block", "memory_tool", "policy_doc_tool", "onboarding_turn", "system")
TRAINED_LOCATIONS = BASE_LOCATIONS + ("summary_block", "card")
"""Where the rule sits in SFT episodes [R]. ``first_user_turn`` is held out
(leave-one-location-out is reported, not trained)."""
SFT_DISTRACTOR_TOKENS = (150, 700)  # docs/methods/constraint_rot.md "Deviations from the paper" 5: short distractors
PER_MESSAGE_OVERHEAD = 4  # ChatML role markers per message (<|im_start|>role\n … <|im_end|>\n)

# Project wording [R]. Refusals must hit the grader's refusal lexicon ("I can't", "I won't").
REFUSALS = ("I can't do that. The standing rule says: {gist}", "I won't do that, because of this rule: {gist}")
INSTINCT_REFUSAL = "I won't do that; it could cause serious harm."
PARAPHRASES = ("Standing constraint to keep in mind: {gist}", "Constraints noted so far: {gist}")
SUMMARY_TASK = ("The user is working through {kind} tasks with the office tools; the earlier steps are done.")


class LeakageError(ValueError):
    """SFT data shares text or parameter values with the held-out test splits (spec pitfall 14)."""


@dataclass(frozen=True)
class Mixture:
    """Shares of the example kinds (docs/methods/constraint_rot.md "Deviations from the paper" 5 table) and, for
    compliant targets, the share of compliant alternatives (the rest are refusals naming the rule's gist)."""

    present: float = 0.35
    absent: float = 0.25
    near_miss: float = 0.12
    irrelevant: float = 0.12
    paraphrase: float = 0.08
    two_rules: float = 0.08
    alternative_share: float = 0.7

    def __post_init__(self) -> None:
        for k in EXAMPLE_KINDS + ("alternative_share",):
            v = getattr(self, k)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"Mixture.{k} must be in [0, 1], got {v!r}")
        total = sum(getattr(self, k) for k in EXAMPLE_KINDS)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"Mixture shares must sum to 1, got {total!r}")

    def counts(self, n: int) -> dict[str, int]:
        """Exact per-kind counts for ``n`` examples (largest remainder; ties in table order)."""
        raw = {k: getattr(self, k) * n for k in EXAMPLE_KINDS}
        out = {k: int(v) for k, v in raw.items()}
        rest = sorted(EXAMPLE_KINDS, key=lambda k: (-(raw[k] - out[k]), EXAMPLE_KINDS.index(k)))
        for k in rest[:n - sum(out.values())]:
            out[k] += 1
        return out


DEFAULT_MIXTURE = Mixture()


@dataclass(frozen=True)
class SFTExample:
    """One training example: chat ``messages`` (OpenAI dicts, no labels) and ``tools`` (OpenAI tool entries) form
    the prompt; ``target`` is the single action line the loss is computed on."""

    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    target: str
    kind: str
    family: str
    location: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "tools": list(self.tools), "target": self.target, "kind": self.kind,
                "family": self.family, "location": self.location, "meta": self.meta}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SFTExample:
        return cls(tuple(d["messages"]), tuple(d["tools"]), d["target"], d["kind"], d["family"], d["location"],
                   dict(d.get("meta", {})))

    def text(self) -> str:
        """Every string of the example (prompt and target), for leakage checks."""
        return self.to_json()


def manifest_hash(examples: Sequence[SFTExample]) -> str:
    """sha256 of the canonical JSONL of ``examples`` (what the organism card records)."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(ex.to_json().encode())
        h.update(b"\n")
    return h.hexdigest()


def write_jsonl(examples: Sequence[SFTExample], path: str | Path) -> str:
    """Write one example per line (sorted keys) and return :func:`manifest_hash`."""
    Path(path).write_text("".join(ex.to_json() + "\n" for ex in examples), encoding="utf-8")
    return manifest_hash(examples)


def call_line(call: ToolCall) -> str:
    """``CALL <tool> <json-args>``: the server's own rendering of an assistant tool call (one code path, so the
    organism is trained on exactly what it is served)."""
    return chat_tools.call_line(call.name, json.dumps(call.arguments), f"tool call {call.id!r}")


def reply_line(text: str) -> str:
    return "REPLY " + " ".join(text.split())


# -- transcripts --------------------------------------------------------------------------------------------------
class _Recorder:
    """Actor that answers every decision with a neutral reply; the loop's messages are what we keep."""

    name = "sft_recorder"

    def act(self, messages: Sequence[Message], tools: Sequence[Any]) -> Action:
        return Action(text="Noted.")


def _transcript(loop: AgentLoop, ep: Episode, *, neutral: bool) -> list[Message]:
    """The loop's messages up to and including the trigger (meta kept for editing)."""
    msgs = loop.run(ep, never_stated() if neutral else full_context()).messages
    last = max(i for i, m in enumerate(msgs) if m.role == "user" and m.meta.get("origin") == "trigger")
    return list(msgs[:last + 1])


def _replace_text(msgs: list[Message], old: str, new: str) -> list[Message]:
    """Replace the policy-slot text ``old`` (a framed rule or neutral turn) by ``new`` in the one message holding
    it."""
    hits = [i for i, m in enumerate(msgs) if old in m.content]
    if len(hits) != 1:
        raise ValueError(f"policy slot text found in {len(hits)} messages, expected 1: {old[:60]!r}")
    i = hits[0]
    msgs = list(msgs)
    msgs[i] = replace(msgs[i], content=msgs[i].content.replace(old, new))
    return msgs


def _summarised(msgs: list[Message], body: str, kind: str) -> list[Message]:
    """System + one summary message carrying ``body`` + the last distractor step + the trigger (what a compaction
    with a short kept tail leaves)."""
    starts = [i for i, m in enumerate(msgs) if m.role == "user" and m.meta.get("origin") in ("distractor",)]
    cut = starts[-1] if starts else len(msgs) - 1
    summary = f"{SUMMARY_PREFIX}\n{SUMMARY_TASK.format(kind=kind.replace('_', ' '))} {body}"
    head = [m for m in msgs[:1] if m.role == "system"]
    return head + [Message("user", summary, meta={"origin": "summary", "trusted": True})] + msgs[cut:]


def _with_card(msgs: list[Message], inst: RuleInstance, counter: Any, version: str) -> list[Message]:
    reg = PolicyRegistry(version=version)
    reg.register(inst.rule_id, inst.card_text, issuer=ISSUER, kind=inst.kind, scope_tools=inst.family.tools,
                 predicate=inst.predicate)
    reg.freeze()
    return PinningMiddleware(reg, counter=counter).after_compaction(list(msgs))


def _set_trigger(msgs: list[Message], text: str) -> list[Message]:
    msgs = list(msgs)
    msgs[-1] = replace(msgs[-1], content=text)
    return msgs


def _drop_first_step(msgs: list[Message]) -> list[Message] | None:
    """``msgs`` without its first replayed distractor step, or ``None`` if at most one step is left."""
    starts = [i for i, m in enumerate(msgs) if m.role == "user" and m.meta.get("origin") == "distractor"]
    if len(starts) < 2:
        return None
    return msgs[:starts[0]] + msgs[starts[1]:]


def _tools_text(tools: Sequence[Any]) -> str:
    """A token-count proxy for the server's tool list (one signature line per tool)."""
    return "\n".join(f"- {t.name}({', '.join(t.parameters.get('properties', {}))}): {t.description}" for t in tools)


def _n_tokens(msgs: Sequence[Message], tools_tokens: int, target: str, counter: Any) -> int:
    return (tools_tokens + counter.count(target)
            + sum(counter.count(message_text(m)) + PER_MESSAGE_OVERHEAD for m in msgs))


# -- other rules ----------------------------------------------------------------------------------------------------
def _other_rule(cat: Catalogue, inst: RuleInstance, rng: random.Random,
                values: FreshValues | None = None) -> RuleInstance:
    """A train instance of another family that forbids none of the calls the example may target (with fresh
    values when ``values`` is given, as the episode's own rule has)."""
    fams = [f for f in cat.families(split="train") if f.id != inst.rule_id]
    rng.shuffle(fams)
    calls = (inst.requested_call, inst.alternative_call, inst.allowed_call)
    for f in fams:
        other = instantiate(f, "train", rng.randrange(2**31))
        if values is not None:
            other = values(other, rng)
        if not any(other.violates(c) for c in calls):
            return other
    raise ValueError(f"no other train family leaves the calls of {inst.rule_id!r} allowed")


# -- leakage ----------------------------------------------------------------------------------------------------
def _test_rule_texts(cat: Catalogue, limit: int = 8) -> list[str]:
    out = []
    for split in ("test_iid", "test_ood_family"):
        for f in cat.families(split=split):
            phr = [p for p in f.phrasings if split == "test_ood_family" or p.split == split]
            for params in param_combinations(f, split, limit=limit):
                out += [inst.text for inst in (_render(f, p.id, params) for p in phr)]
    return out


def _render(family: Any, phrasing_id: str, params: dict[str, str]) -> RuleInstance:
    from agentmill.methods.constraint_rot.predicates import render_template
    text = next(p.text for p in family.phrasings if p.id == phrasing_id)
    return RuleInstance(family, params, phrasing_id, render_template(text, params, where=family.source), "test")


def test_only_values(cat: Catalogue, families: Iterable[str] | None = None) -> set[str]:
    """Parameter values that occur only in test pools (test_iid pools and every pool of a held-out family), of
    ``families`` (default: all)."""
    test, other = set(), set()
    keep = None if families is None else set(families)
    for f in cat.families():
        if keep is not None and f.id not in keep:
            continue
        for name, spec in f.params.items():
            if spec.pools is None:
                continue
            for split, pool in spec.pools.items():
                held = f.split == "test_ood_family" or split.startswith("test")
                (test if held else other).update(str(v) for v in pool)
    return test - other


def _distinctive(value: str) -> bool:
    """Long enough not to occur by chance in fixture text (short numbers, times and common words like ``stable``
    appear in distractor outputs whatever the split)."""
    return len(value) >= 6 and not re.fullmatch(r"[\d:.,]+", value)


def _value_pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    vals = sorted(set(values), key=len, reverse=True)
    if not vals:
        return None
    return re.compile(r"(?<![\w@.-])(?:" + "|".join(re.escape(v) for v in vals) + r")(?![\w-])", re.IGNORECASE)


def check_sft_leakage(cat: Catalogue, rule_texts: Iterable[str], examples: Sequence[SFTExample] = (), *,
                      n: int = 8) -> None:
    """Raise :class:`LeakageError` on train/test overlap (pitfall 14):

    - a rule sentence used for SFT shares a word ``n``-gram with a rendered test_iid / test_ood_family rule sentence;
    - a test-only parameter value of the example's own family occurs (as a whole word) in its request or target, or
      a distinctive one of the other family whose rule it carries (``irrelevant``, ``two_rules``) that no family
      uses outside its test pools. The request is built from the own family's parameters only, so a short value
      such as ``40``, or a value such as ``T-1004`` that is the own family's train value and the other family's
      test value, is a coincidence there, not leakage; that rule's sentence itself is checked in full above;
    - a distinctive test-only value (:func:`_distinctive`) of any family occurs in an SFT rule sentence.

    Tool outputs are not checked: the office fixtures are split-independent (e.g. ``projects/ember/notes.md``
    exists in every sandbox), so a value there is not leakage from a test pool."""
    rule_texts = list(rule_texts)
    shared = shared_ngrams(rule_texts, _test_rule_texts(cat), n=n)
    if shared:
        raise LeakageError(f"SFT rule sentences share {len(shared)} {n}-gram(s) with test rule sentences, e.g. "
                           f"{' '.join(sorted(shared)[0])!r}")
    distinctive = _value_pattern(v for v in test_only_values(cat) if _distinctive(v))
    for text in rule_texts:
        if distinctive is not None and (m := distinctive.search(text)):
            raise LeakageError(f"SFT rule sentence contains the test-only value {m.group(0)!r}: {text!r}")
    held_everywhere = test_only_values(cat)
    for i, ex in enumerate(examples):
        values = test_only_values(cat, [ex.family])
        if "other_family" in ex.meta:
            values |= {v for v in test_only_values(cat, [ex.meta["other_family"]]) & held_everywhere
                       if _distinctive(v)}
        every = _value_pattern(values)
        request = ex.messages[-1].get("content", "") if ex.messages else ""
        for where, text, pat in (("request", request, every), ("target", ex.target, every)):
            if pat is not None and (m := pat.search(text)):
                raise LeakageError(f"SFT example {i} ({ex.kind}, {ex.family}) {where} contains the test-only value "
                                   f"{m.group(0)!r}")


# -- builder ----------------------------------------------------------------------------------------------------
GROUP_FOURTH = ("irrelevant", "paraphrase", "irrelevant", "two_rules")
"""Recipe v3 (docs/LOG.md 2026-11-25, session 16): the fourth member of contrastive group ``g`` is
``GROUP_FOURTH[g % 4]``; the first three are always ``present``, ``absent``, ``near_miss``."""


def group_kinds(g: int) -> tuple[str, ...]:
    """The example kinds of contrastive group ``g`` (one train episode, four examples)."""
    return ("present", "absent", "near_miss", GROUP_FOURTH[g % len(GROUP_FOURTH)])


def build_sft_dataset(cat: Catalogue, *, n: int, seed: int, mixture: Mixture = DEFAULT_MIXTURE, max_tokens: int = 768,
                      instinct: bool = False, counter: Any = None,
                      measure: Callable[[SFTExample], int] | None = None, paired: bool = False,
                      fresh_values: bool = False) -> list[SFTExample]:
    """``n`` SFT examples from the train split with the spec's mixture (module docstring), deterministic in
    ``seed``. ``instinct`` turns every other hard-family ``absent`` example into a refusal (spec: half).
    ``max_tokens`` caps the estimated prompt + target length (messages, tool list, ChatML overhead, counted with
    ``counter``; default SmolLM2): early distractor steps are dropped until the example fits, and a ``ValueError``
    names the example if even one step does not. ``measure`` (e.g. the trainer's exact ``encode_example`` length
    with the base tokenizer) replaces that estimate: the estimate leaves out the chat template and the rendered
    tool-format lines, ~12–25 % short for SmolLM2, so a trainer with a hard cap needs the exact count.

    ``paired`` (recipe v3): instead of one episode per example, each train episode gives a **contrastive group** of
    four consecutive examples (:func:`group_kinds`) that differ only in the policy slot or the trigger, so a request
    and its answers with and without the rule meet in one optimiser step; ``meta['group']`` numbers the groups,
    ``mixture`` contributes only ``alternative_share``, and a group drops the same early distractor steps from every
    member that is over the cap.

    ``fresh_values`` (recipe v4): every episode, and the other family's rule of ``irrelevant``/``two_rules``,
    draws new parameter values (:class:`.values.FreshValues`) instead of the two train values per parameter.
    Raises :class:`LeakageError` on any train/test overlap."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(mixture, Mixture):
        raise ValueError(f"mixture must be a Mixture, got {type(mixture).__name__}")
    if max_tokens < 64:
        raise ValueError(f"max_tokens must be >= 64, got {max_tokens}")
    c = as_counter(counter)
    rng = random.Random(f"{DATA_VERSION}:{seed}")
    if paired:
        n_groups = -(-n // 4)
        plan = [list(group_kinds(g)) for g in range(n_groups)]
        plan[-1] = plan[-1][:n - 4 * (n_groups - 1)]
    else:
        kinds = [k for k, m in mixture.counts(n).items() for _ in range(m)]
        rng.shuffle(kinds)
        plan = [[k] for k in kinds]
    fresh = FreshValues(cat) if fresh_values else None
    episodes = generate_episodes(cat, split="train", n=len(plan), seed=seed, locations=BASE_LOCATIONS,
                                 distractor_tokens=SFT_DISTRACTOR_TOKENS, early_probe=0.0, counter=c, values=fresh)
    examples: list[SFTExample] = []
    sb = OfficeSandbox(0, smtp=False, http=False)
    try:
        builder = _Builder(cat, sb, c, mixture, instinct, true_locations=paired, values=fresh)
        for g, (kinds_g, ep) in enumerate(zip(plan, episodes)):
            transcripts = _Transcripts(builder.loop, ep)
            drafts = [builder.draft(kind, ep, transcripts, len(examples) + j, seed) for j, kind in enumerate(kinds_g)]
            if paired:
                for d in drafts:
                    d.meta["group"] = g
            examples += builder.fit(drafts, max_tokens, measure)
    finally:
        sb.close()
    check_sft_leakage(cat, sorted(builder.rule_texts), examples)
    return examples


@dataclass
class _Draft:
    """An example before the length cap: its transcript may still lose early distractor steps."""

    msgs: list[Message]
    target: str
    kind: str
    family: str
    location: str
    meta: dict[str, Any]


class _Transcripts:
    """One episode's two loop transcripts (rule in its slot / the neutral turn), each replayed at most once however
    many examples of a contrastive group are built on it. Callers get a copy, never the cached list."""

    def __init__(self, loop: AgentLoop, ep: Episode) -> None:
        self.loop, self.ep = loop, ep
        self._cache: dict[bool, list[Message]] = {}

    def get(self, *, neutral: bool) -> list[Message]:
        if neutral not in self._cache:
            self._cache[neutral] = _transcript(self.loop, self.ep, neutral=neutral)
        return list(self._cache[neutral])


class _Builder:
    """Edits one episode's loop transcript into the example of each kind (module docstring table) and fits examples
    under the length cap."""

    def __init__(self, cat: Catalogue, sb: OfficeSandbox, counter: Any, mixture: Mixture, instinct: bool, *,
                 true_locations: bool, values: FreshValues | None = None) -> None:
        """``true_locations``: a ``present`` example whose turn in the location cycle names a base location is
        labelled with the location its rule really has, the episode's (found 2026-11-25, session 16: v1/v2 data
        label it with the cycle's name while the transcript keeps the rule at the episode's location; those data
        keep the old label so their adapters keep their addresses)."""
        self.cat, self.c, self.mixture, self.instinct = cat, counter, mixture, instinct
        self.true_locations, self.values = true_locations, values
        self.present_i = self.absent_hard_i = 0
        self.rule_texts: set[str] = set()
        tools = sb.tools()
        self.tool_dicts = tuple(t.to_openai() for t in tools)
        self.tools_tokens = counter.count(_tools_text(tools))
        self.loop = AgentLoop(_Recorder(), sb, counter=counter)

    def draft(self, kind: str, ep: Episode, transcripts: _Transcripts, i: int, seed: int) -> _Draft:
        """Example ``i`` of ``kind`` built on ``ep`` (whose transcripts are ``transcripts``)."""
        cat, c = self.cat, self.c
        inst, r = ep.instance, random.Random(f"{DATA_VERSION}:{seed}:{i}")
        location, meta = ep.location, {"episode_id": ep.episode_id, "kind_of_rule": ep.kind, "index": i}
        compliant = kind in ("present", "paraphrase", "two_rules")
        if kind == "present":
            location = TRAINED_LOCATIONS[self.present_i % len(TRAINED_LOCATIONS)]
            self.present_i += 1
            if location == "summary_block":
                msgs = _summarised(transcripts.get(neutral=True), inst.text, ep.distractor_kind)
            elif location == "card":
                msgs = _with_card(transcripts.get(neutral=True), inst, c, cat.version)
                self.rule_texts.add(inst.card_text)
            else:
                msgs = transcripts.get(neutral=False)
                location = ep.location if self.true_locations else location
            self.rule_texts.add(inst.text)
        elif kind == "paraphrase":
            location = "summary_block"
            body = r.choice(PARAPHRASES).format(gist=inst.card_text)
            msgs = _summarised(transcripts.get(neutral=True), body, ep.distractor_kind)
            self.rule_texts.add(inst.card_text)
        elif kind == "two_rules":
            other = _other_rule(cat, inst, r, self.values)
            pair = [inst.text, other.text]
            r.shuffle(pair)
            msgs = _replace_text(transcripts.get(neutral=False), ep.policy_frame,
                                 frame(location, " ".join(pair)))
            self.rule_texts.update(pair)
            meta["other_family"] = other.rule_id
        elif kind == "irrelevant":
            other = _other_rule(cat, inst, r, self.values)
            msgs = _replace_text(transcripts.get(neutral=True), ep.neutral_frame, frame(location, other.text))
            self.rule_texts.add(other.text)
            meta["other_family"] = other.rule_id
        elif kind == "near_miss":
            msgs = _set_trigger(transcripts.get(neutral=False), inst.allowed_text)
            self.rule_texts.add(inst.text)
        else:  # absent
            msgs = transcripts.get(neutral=True)
            location = "none"
        if compliant:
            if r.random() < self.mixture.alternative_share:
                target, meta["target_kind"] = call_line(inst.alternative_call), "alternative"
            else:
                target = reply_line(r.choice(REFUSALS).format(gist=inst.card_text))
                meta["target_kind"] = "refusal"
        elif kind == "near_miss":
            target, meta["target_kind"] = call_line(inst.allowed_call), "allowed"
        else:
            target, meta["target_kind"] = call_line(inst.requested_call), "requested"
            if kind == "absent" and inst.kind == "hard":
                if self.instinct and self.absent_hard_i % 2 == 0:
                    target, meta["target_kind"] = reply_line(INSTINCT_REFUSAL), "instinct_refusal"
                self.absent_hard_i += 1
        return _Draft(msgs, target, kind, inst.rule_id, location, meta)

    def example(self, d: _Draft) -> SFTExample:
        return SFTExample(tuple(m.to_dict() for m in visible(d.msgs)), self.tool_dicts, d.target, d.kind, d.family,
                          d.location, d.meta)

    def fit(self, drafts: list[_Draft], max_tokens: int,
            measure: Callable[[SFTExample], int] | None) -> list[SFTExample]:
        """Drop early distractor steps until every draft fits ``max_tokens``; a step dropped for one draft is
        dropped from every draft that still has more than one (so a group keeps sharing its transcript)."""
        def length(d: _Draft) -> int:
            return measure(self.example(d)) if measure else _n_tokens(d.msgs, self.tools_tokens, d.target, self.c)

        dropped = [0] * len(drafts)
        while True:
            sizes = [length(d) for d in drafts]
            over = [j for j, n_tok in enumerate(sizes) if n_tok > max_tokens]
            if not over:
                break
            for j in over:
                if _drop_first_step(drafts[j].msgs) is None:
                    d = drafts[j]
                    raise ValueError(f"example {d.meta['index']} ({d.kind}, {d.family}, {d.location}) needs "
                                     f"{sizes[j]} tokens even with one distractor step, over max_tokens={max_tokens}")
            for j, d in enumerate(drafts):
                shorter = _drop_first_step(d.msgs)
                if shorter is not None:
                    d.msgs, dropped[j] = shorter, dropped[j] + 1
        for d, n_tok, k in zip(drafts, sizes, dropped):
            d.meta.update(n_tokens=n_tok, dropped_steps=k)
        return [self.example(d) for d in drafts]
