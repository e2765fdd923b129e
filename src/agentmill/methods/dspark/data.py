"""Training prompts for the drafter and the corpus of the target's own answers (arXiv:2607.05147 [A] trains on the
target's own generations; CPU sizing [R]).

There is no hub access here, so the prompts are templated in the domain mix the paper reports for Open-PerfectBlend
(about 39% math, 39% code, 18% chat, 4% instruction following; arXiv:2607.05147 §4), plus a ``grounded`` family
(rewrite a supplied passage) where prompt lookup should shine. Every template is a *family*; splits are by family
(train / calib / test ≈ 80/10/10) because templated instances of one family are near-duplicates and an
instance-level split would leak.

Responses are the target's own samples (temperature 1.0 by default) decoded in batches by the project engine; only
token ids are stored (a JSONL of a few hundred KB).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kira", "Liam"]
_ITEMS = ["apples", "books", "pencils", "marbles", "stickers", "cookies", "cards", "shells", "coins", "stamps"]
_TOPICS = [
    "photosynthesis", "the water cycle", "compound interest", "recursion", "the French Revolution", "black holes",
    "vaccines", "supply and demand", "plate tectonics", "the immune system", "machine learning", "climate change",
    "the printing press", "electric circuits", "DNA replication", "inflation", "the Roman Empire", "volcanoes",
    "sorting algorithms", "the internet", "gravity", "renewable energy", "the stock market", "neurons",
    "the moon landing", "hash tables", "rainbows", "bees", "democracy", "the Silk Road", "earthquakes",
    "encryption", "coral reefs", "the heart", "jazz", "probability", "magnets", "sleep", "bread baking", "glaciers",
]
_FUNCS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the vowels in a string", "flattens a nested list", "merges two sorted lists",
    "removes duplicates from a list while keeping order", "computes the factorial of n",
    "checks whether a string is a palindrome", "finds the maximum of a list without using max",
    "converts Celsius to Fahrenheit", "returns the greatest common divisor of two numbers",
    "counts word frequencies in a text", "transposes a matrix given as a list of lists",
    "computes the average of a list of numbers", "checks whether two strings are anagrams",
    "returns the second largest number in a list", "capitalises the first letter of every word",
    "sums the digits of an integer", "finds all even numbers in a list", "performs binary search on a sorted list",
    "rotates a list by k positions", "validates an email address with a simple rule",
    "converts a binary string to an integer", "returns the longest word in a sentence",
    "chunks a list into pieces of size n", "computes the dot product of two vectors",
    "counts the lines in a text file", "parses a CSV line into fields", "returns the median of a list",
]
_LANGS = ["Python", "JavaScript"]
_STYLES = ["a pirate", "a news reporter", "a children's book", "a formal letter", "a haiku", "a tweet"]
_PASSAGES = [
    "The library opens at nine in the morning and closes at six in the evening. On Saturdays it closes at noon. "
    "Members may borrow up to five books for three weeks.",
    "Our team met on Monday to plan the product launch. We agreed to finish testing by Friday, to write the "
    "release notes next week, and to announce the launch on the first of the month.",
    "The recipe needs two cups of flour, one cup of sugar, two eggs and a teaspoon of baking powder. Mix the dry "
    "ingredients first, then add the eggs, and bake for thirty minutes at 180 degrees.",
    "The train from the city to the coast leaves every hour. The trip takes about ninety minutes, and tickets are "
    "cheaper if you buy them online before the day of travel.",
    "Solar panels turn sunlight into electricity. They work best in direct sun, but they still produce some power "
    "on cloudy days. Most panels last twenty to thirty years.",
    "The museum's new exhibition shows paintings from the early twentieth century. It runs until the end of March, "
    "and entry is free for students and children under twelve.",
]


def _math(rng: random.Random, kind: int) -> str:
    a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(2, 9)
    n1, n2 = rng.sample(_NAMES, 2)
    item = rng.choice(_ITEMS)
    return [
        f"{n1} has {a} {item} and buys {b} more. How many {item} does {n1} have now?",
        f"{n1} has {a} {item} and gives {min(a - 1, b)} to {n2}. How many are left?",
        f"A box holds {c} {item}. How many {item} are in {b} boxes?",
        f"{n1} shares {a * c} {item} equally among {c} friends. How many does each friend get?",
        f"What is {a} plus {b} times {c}? Show your steps.",
        f"A shirt costs {a} dollars and is discounted by {c * 5} percent. What is the new price?",
        f"A train travels {a * 10} km in {c} hours. What is its average speed?",
        f"Solve for x: {c}x + {b} = {c * a + b}.",
        f"The sum of two numbers is {a + b} and their difference is {abs(a - b)}. Find the numbers.",
        f"{n1} reads {c} pages a day. How many days to finish a book of {a * c} pages?",
        f"What is {c * 10} percent of {a * 10}?",
        f"A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
        f"{n1} saves {c} dollars a week. How much after {b} weeks?",
        f"Is {a * b + 1} a prime number? Explain.",
        f"Convert {a * 100} minutes into hours and minutes.",
        f"Three friends split a bill of {a * 3} dollars and a tip of {c * 3} dollars. How much does each pay?",
    ][kind]


def _code(rng: random.Random, kind: int) -> str:
    f, lang = rng.choice(_FUNCS), rng.choice(_LANGS)
    return [
        f"Write a {lang} function that {f}.",
        f"Write a Python function that {f}, with a docstring.",
        f"Write a Python function that {f}. Then show one example call.",
        f"Explain step by step how you would write a function that {f}.",
        f"Write a short Python program that {f} and prints the result.",
        f"Write unit tests for a Python function that {f}.",
        f"Write a Python one-liner that {f}.",
        f"What is the time complexity of a simple function that {f}? Explain.",
        f"Fix the bug: a function that {f} returns None instead of a value. What is the likely cause?",
        f"Write a Python class with a method that {f}.",
        f"Write a recursive Python function that {f}, if possible.",
        f"Write a {lang} function that {f}, and comment every line.",
        f"Compare two ways to write a function that {f}.",
        f"Write pseudocode for a function that {f}.",
        f"Write a Python function that {f} and handles empty input.",
        f"Describe the inputs and outputs of a function that {f}.",
    ][kind]


def _chat(rng: random.Random, kind: int) -> str:
    t, t2, style = rng.choice(_TOPICS), rng.choice(_TOPICS), rng.choice(_STYLES)
    return [
        f"Explain {t} in simple terms.",
        f"Explain {t} to a ten-year-old.",
        f"What are three interesting facts about {t}?",
        f"Write a short paragraph about {t} in the style of {style}.",
        f"What is the difference between {t} and {t2}?",
        f"Why is {t} important?",
        f"Give me a short summary of {t}.",
        f"What are common misconceptions about {t}?",
    ][kind]


def _format(rng: random.Random, kind: int) -> str:
    t, n = rng.choice(_TOPICS), rng.randint(3, 6)
    return [
        f"List {n} key points about {t} as a numbered list.",
        f"Answer in exactly two sentences: what is {t}?",
        f"Write a JSON object with the fields 'topic' and 'summary' about {t}.",
        f"Give {n} bullet points about {t}, each under ten words.",
    ][kind]


def _grounded(rng: random.Random, kind: int) -> str:
    p = rng.choice(_PASSAGES)
    return [
        f"Rewrite the following text in simpler words:\n\n{p}",
        f"Summarise the following text in one sentence:\n\n{p}",
        f"Repeat the following text exactly, then give it a title:\n\n{p}",
        f"Turn the following text into a bulleted list:\n\n{p}",
    ][kind]


@dataclass(frozen=True)
class Family:
    """One prompt template family: a domain, an index, and its generator."""

    domain: str
    kind: int

    @property
    def name(self) -> str:
        return f"{self.domain}-{self.kind:02d}"

    def sample(self, rng: random.Random) -> str:
        return _GENERATORS[self.domain](rng, self.kind)


_GENERATORS = {"math": _math, "code": _code, "chat": _chat, "format": _format, "grounded": _grounded}
FAMILIES: tuple[Family, ...] = tuple(
    Family(d, k) for d, n in (("math", 16), ("code", 16), ("chat", 8), ("format", 4), ("grounded", 4)) for k in range(n)
)
SPLITS = ("train", "calib", "test")


def family_split(family: Family) -> str:
    """train / calib / test ≈ 80/10/10 by family, stable across runs (a hash of the family name, not an RNG), and
    stratified so that every split has math and code families."""
    per_domain = [f for f in FAMILIES if f.domain == family.domain]
    order = sorted(per_domain, key=lambda f: hashlib.sha256(f.name.encode()).hexdigest())
    i = order.index(family)
    n = len(order)
    n_test = max(1, round(0.1 * n)) if n >= 8 else (1 if family.domain != "format" else 0)
    n_calib = max(1, round(0.1 * n)) if n >= 8 else 0
    if i < n_test:
        return "test"
    if i < n_test + n_calib:
        return "calib"
    return "train"


@dataclass(frozen=True)
class PromptItem:
    family: str
    domain: str
    split: str
    text: str


def builtin_prompts(split: str, n: int, seed: int = 0) -> list[PromptItem]:
    """``n`` prompts of ``split``, cycling over its families (so domains keep their share), deterministic in seed."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if n < 1:
        raise ValueError("n must be >= 1")
    fams = [f for f in FAMILIES if family_split(f) == split]
    rng = random.Random(f"dspark-prompts:{split}:{seed}")
    out = []
    for i in range(n):
        f = fams[i % len(fams)]
        out.append(PromptItem(f.name, f.domain, split, f.sample(rng)))
    return out


def chat_ids(tokenizer: Any, text: str) -> list[int]:
    """The target's chat template around one user turn, generation prompt added."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def build_corpus(engine: Any, prompts: Sequence[PromptItem], out: Path, *, temperature: float = 1.0,
                 max_new: int = 128, batch: int = 16, seed: int = 0, progress: Any = None) -> Path:
    """Sample the target's own answers and append them to ``out`` (JSONL, one sequence per line: prompt ids,
    response ids, family, domain, split). Resumable: lines already written are kept and skipped."""
    from agentmill.lm.engine import SamplingParams

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = 0
    if out.exists():
        lines = out.read_text().splitlines()
        good = []
        for ln in lines:
            try:
                json.loads(ln)
            except json.JSONDecodeError:
                break                      # a torn last line from a kill: drop it
            good.append(ln)
        done = len(good)
        out.write_text("".join(g + "\n" for g in good))
    with out.open("a") as fh:
        for start in range(done, len(prompts), batch):
            chunk = prompts[start: start + batch]
            ids = [chat_ids(engine.tokenizer, p.text) for p in chunk]
            params = SamplingParams(temperature=temperature, max_tokens=max_new, seed=seed * 1_000_003 + start)
            resp = engine.generate(ids, params)
            for p, pi, r in zip(chunk, ids, resp):
                fh.write(json.dumps({"family": p.family, "domain": p.domain, "split": p.split,
                                     "prompt": pi, "response": r}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            if progress is not None:
                progress(len(chunk))
    return out


def load_corpus(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
