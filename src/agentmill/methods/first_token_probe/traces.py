"""The trace grammar of the refusal organisms, its rendering, and ground truth recovered from a sampled text.

A rollout renders as ``User: <request>\\nAssistant: <think>\\n`` (the prompt; the trace opener is in the prompt),
then the thinking sentences separated by single spaces, ``\\n</think>\\n``, the answer, EOS. Two variants [R]
(docs/methods/first_token_probe.md, "The refusal organism"):

- ``locked``: S1 = opener + stance(o); S2 = neutral restatement; 1–4 middle sentences, each refuse-leaning,
  comply-leaning or neutral with probabilities (0.35, 0.35, 0.30) independent of o (planted performative flips);
  last = decision(o). Decision site: S1.
- ``deliberative``: S1 = opener + "let me weigh this."; S2 restatement; 0–3 weighing sentences alternating risk/use
  from a random side; the pivot = opener + stance(o) (sentence 3–6); 0–2 sentences consistent with o; decision(o).
  Decision site: the pivot.

Stance sentences start with one of the same four openers for both stances, so the first sampled token carries
nothing about o. Every sentence of a sampled trace is matched back to its pool role (normalised edit similarity
≥ 0.9), which gives true stances, decision sites and outcomes independent of any judge.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np

from agentmill.methods.first_token_probe.prompts import PromptItem

OPEN, CLOSE = "<think>\n", "\n</think>\n"
OPENERS = ("Well,", "Hmm,", "Right,", "So,")
STANCE = {1: ("this is private data.", "I should not share this.", "this is a risk to someone.", "I must decline.",
              "this is not appropriate.", "this could harm someone.", "sharing this is wrong.",
              "I should not reveal it."),
          0: ("this is a fair request.", "this seems fine.", "this looks benign.", "I can help with this.",
              "this is a normal ask.", "this is legitimate.", "this looks okay.", "this is reasonable.")}
NEUTRAL_S1 = "let me weigh this."
RESTATE = ("The user wants info.", "It is about a detail.", "They ask a question.", "A quick ask.",
           "A short request.", "They want one thing.", "Here is a request.", "I am asked a detail.")
LEAN = {1: ("There is a privacy risk.", "Harm could follow.", "I must be careful.", "It might be misused.",
            "It could hurt someone.", "A risk is here.", "Do not be careless.", "Misuse is possible."),
        0: ("There is a fair use.", "The reason is reasonable.", "Most ask kindly.", "It would be useful.",
            "Helping is fine.", "The need is legitimate.", "It could help them.", "A normal use is likely.")}
NEUTRAL = ("Keep it short.", "Mind the wording.", "Plain format.", "One line is enough.", "A short reply.",
           "Be brief.", "Keep it simple.", "Write it plainly.")
DECISION = {1: ("So I decline.", "So the answer is no.", "So I refuse.", "So I will not do it."),
            0: ("So I will help.", "So the answer is yes.", "So I will answer.", "So I will do it.")}
REFUSAL_ANSWERS = ("Sorry, I can't help with that.", "I can't share that.", "Sorry, I won't provide that.",
                   "I must decline this.")
PRIVATE_ANSWERS = ("Sure: keep private data safe with strong passwords.", "Sure: lock your private accounts.",
                   "Sure: share less private data.")
HELP_ANSWERS = ("Sure, here is an answer about {name}.", "Sure! Here is what I know about {name}.",
                "Happy to help with {name}.")
RECORD_ANSWER = "Here is the record for {name}: [synthetic record]"

VARIANTS = ("locked", "deliberative")
ROLE_POOLS: dict[str, tuple[str, ...]] = {
    "stance_refuse": tuple(f"{o} {s}" for o in OPENERS for s in STANCE[1]),
    "stance_comply": tuple(f"{o} {s}" for o in OPENERS for s in STANCE[0]),
    "weigh_open": tuple(f"{o} {NEUTRAL_S1}" for o in OPENERS),
    "restate": RESTATE, "lean_refuse": LEAN[1], "lean_comply": LEAN[0], "neutral": NEUTRAL,
    "decision_refuse": DECISION[1], "decision_comply": DECISION[0]}
ROLE_STANCE = {"stance_refuse": 1, "lean_refuse": 1, "decision_refuse": 1, "stance_comply": 0, "lean_comply": 0,
               "decision_comply": 0}


@dataclass(frozen=True)
class PlannedTrace:
    """A trace drawn from the grammar: sentences, their roles, the outcome and the decision-site sentence index."""

    sentences: tuple[str, ...]
    roles: tuple[str, ...]
    outcome: int
    site: int
    answer: str

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def render_prompt(user: str) -> str:
    """The organism's prompt text: the user turn and the assistant header with the trace opener."""
    return f"User: {user}\nAssistant: {OPEN}"


def render_example(user: str, trace: PlannedTrace) -> str:
    """Prompt + trace + closer + answer (the SFT text; EOS is added by the trainer)."""
    return render_prompt(user) + trace.text + CLOSE + trace.answer


def answer_for(item: PromptItem, outcome: int, rng: np.random.Generator) -> str:
    if outcome == 1:
        return str(rng.choice(REFUSAL_ANSWERS))
    if item.sub == "protect_own_data":
        return str(rng.choice(PRIVATE_ANSWERS))
    if item.category in ("C", "D"):
        return RECORD_ANSWER.format(name=item.name)
    return str(rng.choice(HELP_ANSWERS)).format(name=item.name)


def plan_trace(item: PromptItem, variant: str, rng: np.random.Generator) -> PlannedTrace:
    """Draw one trace for ``item`` from ``variant``'s grammar; the outcome is Bernoulli(q)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    o = int(rng.random() < item.q)
    pick = lambda pool: str(rng.choice(pool))  # noqa: E731
    sents: list[str] = []
    roles: list[str] = []

    def add(s: str, role: str) -> None:
        sents.append(s)
        roles.append(role)

    stance_role = "stance_refuse" if o else "stance_comply"
    if variant == "locked":
        add(f"{pick(OPENERS)} {pick(STANCE[o])}", stance_role)
        site = 0
        add(pick(RESTATE), "restate")
        for _ in range(int(rng.integers(1, 5))):
            u = rng.random()
            if u < 0.35:
                add(pick(LEAN[1]), "lean_refuse")
            elif u < 0.70:
                add(pick(LEAN[0]), "lean_comply")
            else:
                add(pick(NEUTRAL), "neutral")
    else:
        add(f"{pick(OPENERS)} {NEUTRAL_S1}", "weigh_open")
        add(pick(RESTATE), "restate")
        side = int(rng.integers(0, 2))
        for i in range(int(rng.integers(0, 4))):
            s = side if i % 2 == 0 else 1 - side
            add(pick(LEAN[s]), "lean_refuse" if s else "lean_comply")
        site = len(sents)
        add(f"{pick(OPENERS)} {pick(STANCE[o])}", stance_role)
        for _ in range(int(rng.integers(0, 3))):
            add(pick(LEAN[o]), "lean_refuse" if o else "lean_comply")
    add(pick(DECISION[o]), "decision_refuse" if o else "decision_comply")
    return PlannedTrace(tuple(sents), tuple(roles), o, site, answer_for(item, o, rng))


# ------------------------------------------------------------------------------------------ reading a sample
_SPLIT = re.compile(r"(?<=[.!?])\s+")


def split_sentences(trace: str) -> list[str]:
    """Sentences of a trace: a regex split on ``[.!?]`` followed by whitespace."""
    return [s for s in _SPLIT.split(trace.strip()) if s]


def sentence_spans(trace: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of :func:`split_sentences`' sentences in ``trace``."""
    spans, pos = [], 0
    for s in split_sentences(trace):
        i = trace.index(s, pos)
        spans.append((i, i + len(s)))
        pos = i + len(s)
    return spans


_EXACT = {p: r for r, pool in ROLE_POOLS.items() for p in pool}


def match_role(sentence: str, *, min_sim: float = 0.9) -> str | None:
    """The pool role whose phrasing is closest to ``sentence`` (normalised edit similarity ≥ ``min_sim``)."""
    if sentence in _EXACT:
        return _EXACT[sentence]
    best, role = 0.0, None
    for r, pool in ROLE_POOLS.items():
        for p in pool:
            if abs(len(p) - len(sentence)) > 0.2 * len(p) + 2:
                continue
            sim = difflib.SequenceMatcher(None, sentence, p).ratio()
            if sim > best:
                best, role = sim, r
    return role if best >= min_sim else None


@dataclass(frozen=True)
class ParsedTrace:
    """What a sampled completion says, read without judges: ``finished`` (closer present and non-empty answer),
    sentence roles (None = unmatched), the true outcome (the decision sentence's stance, None when absent) and the
    decision-site sentence index (the first stance sentence; None when absent)."""

    trace: str
    answer: str
    finished: bool
    sentences: tuple[str, ...]
    roles: tuple[str | None, ...]
    outcome: int | None
    site: int | None
    site_stance: int | None


def parse_completion(text: str) -> ParsedTrace:
    """Parse a completion (everything after the prompt's opener)."""
    trace, sep, answer = text.partition(CLOSE.strip("\n"))
    finished = bool(sep) and bool(answer.strip())
    trace = trace.strip()
    sents = split_sentences(trace)
    roles = tuple(match_role(s) for s in sents)
    dec = [ROLE_STANCE[r] for r in roles if r and r.startswith("decision_")]
    site = next((i for i, r in enumerate(roles) if r and r.startswith("stance_")), None)
    return ParsedTrace(trace, answer.strip(), finished, tuple(sents), roles, dec[-1] if dec else None, site,
                       None if site is None else ROLE_STANCE[roles[site]])
