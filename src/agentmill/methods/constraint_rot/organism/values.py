"""Fresh parameter values for the organism's SFT episodes (recipe v4) [R].

Why: the 960-example organisms conditioned on the rule a little on train-split episodes (v2: 11 vs 0 discordant
pairs; v3: 8 vs 2) and not on test_iid ones (3 vs 2; 5 vs 4). Swapping the rule sentence for the other split's
phrasing, with each episode's own values, hardly changed that in either direction (docs/LOG.md 2026-11-25, session
17). What the organisms learned goes with the two train values each parameter has, not with the rule's wording.
So here each train episode draws new values: no value recurs often enough to be memorised, and only reading the
rule decides the answer. Outcome (docs/LOG.md 2026-11-25, session 18): the 960-example v4 organism still fails its
gates (G1 .467); its held-out effect is no longer smaller than its train one (10 vs 3 against 9 vs 4), but small.

A value is replaced according to its shape (:func:`FreshValues.draw`). A value whose shape carries meaning a
generator cannot keep (paths, codes such as ``VIP40``, titles, diagnoses) keeps its train value. The numbers of one
instance are scaled by one factor and its times moved by one shift, so their order survives. A draw is accepted
only if the instance still means the same thing: the trigger's call violates the rule, and neither the allowed
near-miss call nor the compliant alternative does. Otherwise another draw follows. After :data:`MAX_TRIES` draws the
train values are kept (and counted).

Held-out values stay out (pitfall 14): no generated name or word occurs in any pool of any split or family, and no
generated value is a dev or test pool value of its own family, or of any family unless it is a bare number or time
(``10:00`` or ``40`` recurs everywhere by chance; the leakage guard makes the same exception).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from agentmill.methods.constraint_rot.catalogue import Catalogue, RuleInstance, with_params
from agentmill.methods.constraint_rot.schema import luhn_ok

MAX_TRIES = 50
FACTORS = (0.5, 0.6, 0.75, 0.8, 1.25, 1.4, 1.5, 1.75, 2.0)
"""One of these scales every integer of an instance (order-preserving; never 1)."""
SHIFTS = (-90, -60, -30, 30, 60, 90)
"""Minutes one instance's times move together (order-preserving; never 0)."""
EARLIEST, LATEST = 6 * 60, 22 * 60
"""Shifted times stay inside 06:00–22:00, so a trigger's fixed literal end (e.g. 23:00) stays after its start."""

# Project-written name parts [R]; any part that occurs in a catalogue pool is dropped at construction.
FIRST = ("Aino", "Bastian", "Cosima", "Dario", "Edda", "Fabian", "Gisela", "Hamid", "Isolde", "Jarek", "Kalani",
         "Leandro", "Mirela", "Nils", "Oriana", "Pietro", "Rahel", "Soren", "Talia", "Ulrich", "Valeska", "Wiebke",
         "Yannick", "Zuri", "Amara", "Benedikt", "Corin", "Dagny", "Emeric", "Freya")
LAST = ("Achterberg", "Bellamy", "Cardoso", "Dunmore", "Esposito", "Falkner", "Gallardo", "Hartikainen", "Ilves",
        "Jovanovic", "Kowalczyk", "Lindqvist", "Marchetti", "Nakagawa", "Oyelaran", "Pellegrini", "Quaresma",
        "Ruiz", "Sandoval", "Thorsen", "Uribe", "Varga", "Wexler", "Yildiz", "Zamora", "Abernathy", "Brodeur",
        "Castellanos", "Delacroix", "Eriksen")
STREET_KINDS = ("Lane", "Row", "Street", "Court", "Way", "Road", "Place", "Close")
ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "gl")
VOWELS = ("a", "e", "i", "o", "u")

TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
INTEGER = re.compile(r"^[1-9]\d*$")
PERSON = re.compile(r"^[A-Z][a-z]+ [A-Z][a-z]+$")
ADDRESS = re.compile(r"^\d+ [A-Z][a-z]+ [A-Z][a-z]+, [A-Z][a-z]+$")
IDENT = re.compile(r"^([A-Z]+-)(\d)(\d*)$")
KEY = re.compile(r"^([a-z]+_[a-z]+_)([A-Za-z0-9]+)$")
HOST = re.compile(r"^((?:[a-z0-9-]+\.)*)([a-z0-9]+(?:-[a-z0-9]+)*)(\.[a-z]+)$")
SLUG = re.compile(r"^([a-z]+[-_])?([a-z]+)$")
CODENAME = re.compile(r"^[A-Z][a-z]+$")
KEEP = frozenset({("health.medical_record", "diagnosis")})
"""(family, parameter) pairs whose one-word values are meaningful words (a diagnosis), which a non-word would not
replace faithfully; every other one-word value (a project, branch, service or handle) is a name."""
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _words(value: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", value)}


class FreshValues:
    """Draws new values for a train instance's pool parameters (module docstring). Deterministic in the ``rng``
    passed to :meth:`__call__`; ``fallbacks`` counts instances that kept their train values."""

    def __init__(self, cat: Catalogue) -> None:
        pools: set[str] = set()
        self.held: dict[str, set[str]] = {}
        for f in cat.families():
            self.held[f.id] = set()
            for spec in f.params.values():
                for split, pool in (spec.pools or {}).items():
                    pools.update(str(v) for v in pool)
                    if f.split == "test_ood_family" or split != "train":
                        self.held[f.id].update(str(v) for v in pool)
        self.held_anywhere = set().union(*self.held.values())
        self.taken_words = set().union(*(_words(v) for v in pools))
        self.first = [n for n in FIRST if n.lower() not in self.taken_words]
        self.last = [n for n in LAST if n.lower() not in self.taken_words]
        self.fallbacks = 0

    def __call__(self, inst: RuleInstance, rng: random.Random) -> RuleInstance:
        """``inst`` with fresh values for every pool parameter whose shape is known, same phrasing and requests."""
        if not _means_the_same(inst):
            raise ValueError(f"{inst.rule_id}: the train instance itself is inconsistent (trigger allowed, or the "
                             "near-miss / alternative forbidden); the catalogue self-check should have caught it")
        pools = {n: str(v) for n, v in inst.params.items() if inst.family.params[n].pools is not None}
        checks = {n: inst.family.params[n].check for n in pools}
        pools_kept = {n: v for n, v in pools.items() if (inst.rule_id, n) in KEEP}
        for _ in range(MAX_TRIES):
            new = self.draw({n: v for n, v in pools.items() if n not in pools_kept}, checks, rng,
                            held=self.held[inst.rule_id])
            if new is None:
                continue
            fresh = with_params(inst, {**new, **pools_kept})
            if _means_the_same(fresh):
                return fresh
        self.fallbacks += 1
        return inst

    def draw(self, values: Mapping[str, str], checks: Mapping[str, Any], rng: random.Random, *,
             held: frozenset[str] | set[str] = frozenset()) -> dict[str, str] | None:
        """One candidate: a new value per parameter (equal old values stay equal), or ``None`` when two different
        values collide or a generated value is held out: a dev/test pool value of the own family (``held``), or of
        any family unless it is a bare number or time (those recur everywhere by chance, as the leakage guard
        also assumes)."""
        factor, shift = rng.choice(FACTORS), rng.choice(SHIFTS)
        mapping: dict[str, str] = {}
        for name in sorted(values):
            old = values[name]
            if old not in mapping:
                new = self._one(old, checks.get(name), factor, shift, rng)
                if new is None:
                    return None
                mapping[old] = new
        renamed = [new for old, new in mapping.items() if new != old]
        if len(set(mapping.values())) != len(mapping) or any(self._is_held(v, held) for v in renamed):
            return None
        return {name: mapping[values[name]] for name in values}

    def _is_held(self, value: str, held: frozenset[str] | set[str]) -> bool:
        return value in held or (value in self.held_anywhere and not (TIME.match(value) or INTEGER.match(value)))

    def _one(self, old: str, check: Any, factor: float, shift: int, rng: random.Random) -> str | None:
        if check == "luhn":
            body = "4" + "".join(rng.choice("0123456789") for _ in range(14))
            return next(body + d for d in "0123456789" if luhn_ok(body + d))  # exactly one check digit fits
        if check == "ssn":
            return f"9{rng.randrange(100):02d}-{rng.randrange(1, 100):02d}-{rng.randrange(1, 10000):04d}"
        if m := TIME.match(old):
            t = int(m.group(1)) * 60 + int(m.group(2)) + shift
            return f"{t // 60:02d}:{t % 60:02d}" if EARLIEST <= t <= LATEST else None
        if INTEGER.match(old):
            return str(max(1, round(int(old) * factor)))
        if PERSON.match(old):
            return f"{rng.choice(self.first)} {rng.choice(self.last)}"
        if ADDRESS.match(old):
            return f"{rng.randrange(2, 200)} {self._word(rng).title()} {rng.choice(STREET_KINDS)}, " \
                   f"{self._word(rng).title()}"
        if m := IDENT.match(old):
            return m.group(1) + m.group(2) + "".join(rng.choice("0123456789") for _ in m.group(3))
        if m := KEY.match(old):
            return m.group(1) + "".join(rng.choice(ALNUM) for _ in m.group(2))
        if m := HOST.match(old):
            label = self._word(rng) + (f"-{self._word(rng)}" if "-" in m.group(2) else "")
            return m.group(1) + label + m.group(3)
        if CODENAME.match(old):
            return self._word(rng).title()
        if m := SLUG.match(old):
            return (m.group(1) or "") + self._word(rng)
        return old

    def _word(self, rng: random.Random) -> str:
        """A pronounceable non-word of 2–3 syllables that is no word of any catalogue pool."""
        while True:
            w = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(rng.choice((2, 3))))
            if w not in self.taken_words:
                return w


def _means_the_same(inst: RuleInstance) -> bool:
    return (inst.violates(inst.requested_call) and not inst.violates(inst.allowed_call)
            and not inst.violates(inst.alternative_call))
