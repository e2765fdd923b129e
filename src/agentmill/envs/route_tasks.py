"""RouteTasks: 1,200 generated queries with verifiable answers for training and testing a router over workers.

Ten categories × six templates × 20 queries. The split is **by template** (so a test phrasing was never seen in
training): 36 / 12 / 12 templates → 720 / 240 / 240 queries, every category with at least one template in each split.
The categories are chosen so that different workers are right on different parts of the mix [R]:

1. ``arith_clean``   "What is 37 + 58?" (the first two templates reuse :mod:`agentmill.envs.arithmetic`)
2. ``arith_words``   number words and short stories ("What is thirty-seven plus fifty-eight?")
3. ``arith_decoy``   "How many characters are in '37+58'?" — an arithmetic solver answers confidently and wrongly
4. ``string_ops``    reverse / count / case / prefix / last letter / length
5. ``dates``         weekdays, day differences, date offsets
6. ``units``         conversions, answers compared after rounding to 2 decimals
7. ``facts``         one lookup in the shipped fact table (``data/route_facts.json``)
8. ``facts_compose`` two facts combined by arithmetic (no single worker can answer)
9. ``sentiment``     short review snippets (``data/route_sentiment.json``), positive / negative
10. ``yes_no``       commonsense yes/no questions (``data/route_yes_no.json``)

Verifiers: numbers within 1e-6, unit answers within half a cent of the 2-decimal value, strings compared after
case/whitespace/edge-punctuation normalisation, labels by their first word. Generation is deterministic in ``seed``.
"""

from __future__ import annotations

import datetime as _dt
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from agentmill.envs.arithmetic import make_task

CATEGORIES = ("arith_clean", "arith_words", "arith_decoy", "string_ops", "dates", "units", "facts", "facts_compose",
              "sentiment", "yes_no")
TEMPLATES_PER_CATEGORY = 6
SPLITS = ("train", "val", "test")
Kind = Literal["number", "units", "text", "label"]


@dataclass(frozen=True)
class RouteQuery:
    """One query: a stable id ``<category>-t<template>-<i>``, its text, its reference answer and how it is checked."""

    qid: str
    category: str
    template: int
    text: str
    answer: str
    kind: Kind
    split: str
    aliases: tuple[str, ...] = ()

    @property
    def template_id(self) -> str:
        return f"{self.category}-t{self.template}"


# ----------------------------------------------------------------------------------------------------- data tables

@lru_cache(maxsize=None)
def _data(name: str) -> dict:
    return json.loads(resources.files("agentmill.envs").joinpath("data", name).read_text(encoding="utf-8"))


def facts() -> list[dict]:
    """The fact table: rows ``{kind, subject, answer, text[, aliases]}`` (kinds: symbol, atomic_number, capital,
    currency, event_year)."""
    return list(_data("route_facts.json")["facts"])


def yes_no_questions() -> list[dict]:
    return list(_data("route_yes_no.json")["questions"])


def reviews() -> list[dict]:
    return list(_data("route_sentiment.json")["reviews"])


# ----------------------------------------------------------------------------------------------------- number words

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """English words for 0 <= n <= 999: ``number_words(37) == "thirty-seven"``, ``number_words(105) == "one hundred
    five"``."""
    if not 0 <= n <= 999:
        raise ValueError(f"number_words covers 0..999, got {n}")
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


# ----------------------------------------------------------------------------------------------------- generators

_NAMES = ("Sara", "Tom", "Ana", "Raj", "Mia", "Leo", "Ivy", "Omar", "Zoe", "Ben")
_WORDS = ("garden", "planet", "window", "basket", "silver", "rocket", "pencil", "button", "candle", "forest",
          "marble", "bottle", "ladder", "mirror", "pocket", "ribbon", "saddle", "tunnel", "violin", "wallet",
          "banana", "cherry", "dragon", "engine", "falcon", "guitar", "harbor", "island", "jacket", "kitten",
          "lemon", "meadow", "napkin", "orange", "parrot", "rabbit", "summer", "tomato", "umbrella", "velvet",
          "winter", "yellow", "zipper", "anchor", "breeze", "castle", "desert", "feather", "glider", "hammer")
_MONTHS = ("January February March April May June July August September October November December").split()
_WEEKDAYS = ("Monday Tuesday Wednesday Thursday Friday Saturday Sunday").split()
# Conversion factors are exact by definition (international inch/foot/pound/mile, US gallon = 231 in³) [R].
UNIT_FACTORS = {"km_mi": 1 / 1.609344, "lb_kg": 0.45359237, "in_cm": 2.54, "ft_m": 0.3048, "gal_l": 3.785411784}


def _date(rng: random.Random) -> _dt.date:
    return _dt.date(2000, 1, 1) + _dt.timedelta(days=rng.randint(0, 9000))


def _long(d: _dt.date) -> str:
    return f"{_MONTHS[d.month - 1]} {d.day}, {d.year}"


def _arith_clean(t: int, i: int, rng: random.Random, seed: int) -> tuple[str, str, Kind]:
    if t == 0:
        task = make_task(2, seed, i)  # a + b, two digits each (envs.arithmetic level 2)
        return task.question, str(task.answer), "number"
    if t == 1:
        task = make_task(6, seed, i)  # 2-digit × 1-digit (level 6)
        return task.question, str(task.answer), "number"
    a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(2, 9)
    if t == 2:
        return f"What is {a} + {b} + {c}?", str(a + b + c), "number"
    if t == 3:
        a += 100
        return f"Compute {a} - {b}.", str(a - b), "number"
    if t == 4:
        return f"Calculate ({a} + {b}) * {c}.", str((a + b) * c), "number"
    return f"What is {a} * {c} - {b}?", str(a * c - b), "number"


def _arith_words(t: int, i: int, rng: random.Random, seed: int) -> tuple[str, str, Kind]:
    a, b = rng.randint(11, 99), rng.randint(2, 40)
    name = rng.choice(_NAMES)
    A, B = number_words(a), number_words(b)
    if t == 0:
        return f"What is {A} plus {B}?", str(a + b), "number"
    if t == 1:
        b = rng.randint(2, 9)
        return f"What is {A} times {number_words(b)}?", str(a * b), "number"
    if t == 2:
        return f"{name} had {A} apples and then got {B} more. How many apples does {name} have now?", str(a + b), \
            "number"
    if t == 3:
        return f"What do you get if you subtract {B} from {A}?", str(a - b), "number"
    if t == 4:
        b = rng.randint(2, 9)
        return f"A box holds {A} pencils. How many pencils are in {number_words(b)} boxes?", str(a * b), "number"
    return (f"{name} read {A} pages on Monday and {B} pages on Tuesday. How many pages did {name} read in total?",
            str(a + b), "number")


def _arith_decoy(t: int, i: int, rng: random.Random, seed: int) -> tuple[str, str, Kind]:
    a, b, c = rng.randint(1, 999), rng.randint(1, 99), rng.randint(1, 99)
    if t == 0:
        s = f"{a}+{b}"
        return f"How many characters are in '{s}'?", str(len(s)), "number"
    if t == 1:
        s = f"{a}*{b}"
        return f"How many characters does the string '{s}' have?", str(len(s)), "number"
    if t == 2:
        s = f"{a}-{b}"
        return f"What is the length of the text '{s}'?", str(len(s)), "number"
    if t == 3:
        s = f"{a}+{b}+{c}"
        return f"Count the characters in '{s}'.", str(len(s)), "number"
    if t == 4:
        s = f"{a}*{b}"
        return f"How many digits are in '{s}'?", str(sum(ch.isdigit() for ch in s)), "number"
    s = f"{a}+{b}+{c}" if rng.random() < 0.5 else f"{a}+{b}"
    return f"How many plus signs are in '{s}'?", str(s.count("+")), "number"


def _string_ops(t: int, i: int, rng: random.Random, seed: int) -> tuple[str, str, Kind]:
    w = _WORDS[(i + 8 * t) % len(_WORDS)]  # distinct words within a template
    if t == 0:
        return f"Reverse the word '{w}'.", w[::-1], "text"
    if t == 1:
        c = rng.choice(sorted(set(w)))
        return f"How many times does the letter '{c}' appear in '{w}'?", str(w.count(c)), "number"
    if t == 2:
        return f"Write '{w}' in uppercase.", w.upper(), "text"
    if t == 3:
        k = rng.randint(2, 4)
        return f"What are the first {k} letters of '{w}'?", w[:k], "text"
    if t == 4:
        return f"What is the last letter of '{w}'?", w[-1], "text"
    return f"How many letters are in the word '{w}'?", str(len(w)), "number"


def _dates(t: int, i: int, rng: random.Random, seed: int) -> tuple[str, str, Kind]:
    d = _date(rng)
    n = rng.randint(5, 400)
    e = d + _dt.timedelta(days=n)
    if t == 0:
        return f"What day of the week was {d.isoformat()}?", _WEEKDAYS[d.weekday()], "text"
    if t == 1:
        return f"How many days are there from {d.isoformat()} to {e.isoformat()}?", str(n), "number"
    if t == 2:
        return f"What date is {n} days after {d.isoformat()}? Answer as YYYY-MM-DD.", e.isoformat(), "text"
    if t == 3:
        return f"On what day of the week did {_long(d)} fall?", _WEEKDAYS[d.weekday()], "text"
    if t == 4:
        return f"How many days passed between {_long(d)} and {_long(e)}?", str(n), "number"
    return f"What date was {n} days before {e.isoformat()}? Answer as YYYY-MM-DD.", d.isoformat(), "text"


def _units(t: int, i: int, rng: random.Random, seed: int) -> tuple[str, str, Kind]:
    x = round(rng.uniform(1, 200), 1)
    if t == 0:
        return f"Convert {x} kilometres to miles.", f"{x * UNIT_FACTORS['km_mi']:.6f}", "units"
    if t == 1:
        return f"How many kilograms are {x} pounds?", f"{x * UNIT_FACTORS['lb_kg']:.6f}", "units"
    if t == 2:
        return f"Convert {x} degrees Celsius to Fahrenheit.", f"{x * 9 / 5 + 32:.6f}", "units"
    if t == 3:
        return f"How many centimetres are in {x} inches?", f"{x * UNIT_FACTORS['in_cm']:.6f}", "units"
    if t == 4:
        return f"Convert {x} feet to metres.", f"{x * UNIT_FACTORS['ft_m']:.6f}", "units"
    return f"How many litres are {x} US gallons?", f"{x * UNIT_FACTORS['gal_l']:.6f}", "units"


def _fact_pool(kind: str) -> list[dict]:
    return [f for f in facts() if f["kind"] == kind]


def _facts_all(seed: int) -> dict[int, list[tuple[str, str, Kind, tuple[str, ...]]]]:
    """20 distinct facts per template (no fact is asked by two templates of one kind)."""
    rng = random.Random(f"route-facts|{seed}")
    out: dict[int, list] = {}
    caps = rng.sample(_fact_pool("capital"), 20)
    out[0] = [(f"What is the capital of {f['subject']}?", f["answer"], "text", tuple(f.get("aliases", ())))
              for f in caps]
    elements = _fact_pool("symbol")
    picked = rng.sample(range(len(elements)), 60)
    sym = [elements[k] for k in picked[:20]]
    num = [f for f in _fact_pool("atomic_number") if f["subject"] in {elements[k]["subject"] for k in picked[20:40]}]
    rev = [elements[k] for k in picked[40:60]]
    out[1] = [(f"What is the chemical symbol for {f['subject'].lower()}?", f["answer"], "text", ()) for f in sym]
    out[2] = [(f"What is the atomic number of {f['subject'].lower()}?", f["answer"], "number", ()) for f in num]
    cur = rng.sample(_fact_pool("currency"), 20)
    out[3] = [(f"What is the ISO currency code of {f['subject']}?", f["answer"], "text", ()) for f in cur]
    ev = rng.sample(_fact_pool("event_year"), 20)
    out[4] = [(f"In what year did {f['subject']} take place?", f["answer"], "number", ()) for f in ev]
    out[5] = [(f"Which element has the chemical symbol {f['answer']}?", f["subject"], "text", ()) for f in rev]
    return out


def _compose_all(seed: int) -> dict[int, list[tuple[str, str, Kind, tuple[str, ...]]]]:
    rng = random.Random(f"route-compose|{seed}")
    ev = _fact_pool("event_year")
    z = {f["subject"]: int(f["answer"]) for f in _fact_pool("atomic_number")}
    names = sorted(z)
    out: dict[int, list] = {t: [] for t in range(6)}
    for t in range(6):
        seen = set()
        while len(out[t]) < 20:
            if t in (0, 3, 5):
                e1, e2 = rng.sample(ev, 2)
                y1, y2 = int(e1["answer"]), int(e2["answer"])
                if y1 == y2 or (e1["subject"], e2["subject"]) in seen:
                    continue
                if y1 > y2:
                    e1, e2, y1, y2 = e2, e1, y2, y1
                seen.add((e1["subject"], e2["subject"]))
                a, b = e1["subject"], e2["subject"]
                text = {0: f"How many years passed between {a} and {b}?",
                        3: f"How many years after {a} did {b} happen?",
                        5: f"How many years before {b} was {a}?"}[t]
                out[t].append((text, str(y2 - y1), "number", ()))
            else:
                pool = names if t != 4 else [n for n in names if z[n] <= 30]
                x, y = rng.sample(pool, 2)
                if (x, y) in seen:
                    continue
                seen.add((x, y))
                xl, yl = x.lower(), y.lower()
                if t == 1:
                    out[t].append((f"What is the difference between the atomic numbers of {xl} and {yl}?",
                                   str(abs(z[x] - z[y])), "number", ()))
                elif t == 2:
                    out[t].append((f"What is the sum of the atomic numbers of {xl} and {yl}?", str(z[x] + z[y]),
                                   "number", ()))
                else:
                    out[t].append((f"What is the atomic number of {xl} multiplied by that of {yl}?",
                                   str(z[x] * z[y]), "number", ()))
    return out


_SENTIMENT = ("Is this review positive or negative? '{r}'", "Review: {r} Sentiment (positive or negative):",
              "Classify the sentiment of this review as positive or negative: {r}",
              "'{r}' Was the reviewer happy (positive) or unhappy (negative)?",
              "Customer said: \"{r}\" Positive or negative?", "Label this product review as positive or negative. {r}")
_YES_NO = ("Answer yes or no: {q}", "{q} Answer yes or no.", "Question: {q} (yes/no)", "Yes or no? {q}",
           "Reply with yes or no. {q}", "{q} Yes or no?")

_GENERATORS = {"arith_clean": _arith_clean, "arith_words": _arith_words, "arith_decoy": _arith_decoy,
               "string_ops": _string_ops, "dates": _dates, "units": _units}


def template_split(seed: int = 0) -> dict[str, str]:
    """``{template_id: split}``: per category 4/1/1 templates (train/val/test), except two categories with 3/2/1 and
    two with 3/1/2, so the totals are 36/12/12 templates = 60/20/20 % of queries, drawn from ``seed``."""
    rng = random.Random(f"route-split|{seed}")
    cats = list(CATEGORIES)
    rng.shuffle(cats)
    shape = {c: (4, 1, 1) for c in cats[4:]} | {c: (3, 2, 1) for c in cats[:2]} | {c: (3, 1, 2) for c in cats[2:4]}
    out = {}
    for c in CATEGORIES:
        order = list(range(TEMPLATES_PER_CATEGORY))
        rng.shuffle(order)
        ntr, nva, _ = shape[c]
        for k, t in enumerate(order):
            out[f"{c}-t{t}"] = "train" if k < ntr else ("val" if k < ntr + nva else "test")
    return out


class RouteTasks:
    """The 1,200 queries (``per_template`` = 20 each; smaller values give a smaller, still-stratified set).

    ``queries`` in category/template/index order; ``split(name)``; ``by_id[qid]``; ``texts`` (qid → text);
    :func:`verify` scores an answer.
    """

    name = "route-tasks"

    def __init__(self, seed: int = 0, per_template: int = 20) -> None:
        if not 1 <= per_template <= 20:
            raise ValueError(f"per_template must be in 1..20 (the data tables hold 20 per template), got "
                             f"{per_template}")
        self.seed, self.per_template = seed, per_template
        splits = template_split(seed)
        fact_rows, compose_rows = _facts_all(seed), _compose_all(seed)
        rev, yn = reviews(), yes_no_questions()
        qs: list[RouteQuery] = []
        for cat in CATEGORIES:
            for t in range(TEMPLATES_PER_CATEGORY):
                split = splits[f"{cat}-t{t}"]
                for i in range(per_template):
                    aliases: tuple[str, ...] = ()
                    if cat in _GENERATORS:
                        rng = random.Random(f"route|{seed}|{cat}|{t}|{i}")
                        text, ans, kind = _GENERATORS[cat](t, i, rng, seed)
                    elif cat == "facts":
                        text, ans, kind, aliases = fact_rows[t][i]
                    elif cat == "facts_compose":
                        text, ans, kind, aliases = compose_rows[t][i]
                    elif cat == "sentiment":
                        r = rev[t * 20 + i]
                        text, ans, kind = _SENTIMENT[t].format(r=r["review"]), r["label"], "label"
                    else:
                        q = yn[t * 20 + i]
                        text, ans, kind = _YES_NO[t].format(q=q["question"]), q["answer"], "label"
                    qs.append(RouteQuery(f"{cat}-t{t}-{i:02d}", cat, t, text, ans, kind, split, aliases))
        self.queries = qs
        self.by_id = {q.qid: q for q in qs}
        self.texts = {q.qid: q.text for q in qs}

    def split(self, name: str) -> list[RouteQuery]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        return [q for q in self.queries if q.split == name]

    def ids(self, name: str) -> list[str]:
        return [q.qid for q in self.split(name)]

    def __len__(self) -> int:
        return len(self.queries)


# ----------------------------------------------------------------------------------------------------- verifiers

_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def first_number(text: str) -> float | None:
    """The first number in ``text`` (thousands commas dropped), or None."""
    m = _NUM.search(text[:200])
    if m is None:
        return None
    try:
        return float(m.group(0).replace(",", ""))
    except ValueError:
        return None


def normalise(text: str) -> str:
    """Lower case, collapsed whitespace, surrounding quotes and edge punctuation removed."""
    s = " ".join(text.strip().lower().split())
    return s.strip(" '\"`.,;:!?")


def verify(query: RouteQuery, answer: str | None) -> float:
    """1.0 if ``answer`` is right for ``query``, else 0.0; ``None`` (abstention) scores 0."""
    if answer is None:
        return 0.0
    if query.kind in ("number", "units"):
        x = first_number(answer)
        if x is None:
            return 0.0
        tol = 0.005 + 1e-6 if query.kind == "units" else 1e-6
        return float(abs(x - float(query.answer)) <= tol)
    if query.kind == "label":
        words = normalise(answer).split()
        return float(bool(words) and words[0].strip(".,;:!?'\"") == query.answer)
    got = normalise(answer)
    return float(any(got == normalise(a) for a in (query.answer, *query.aliases)))


def categories_of(queries: Sequence[RouteQuery]) -> list[str]:
    return [q.category for q in queries]
