"""Workers: anything that answers a query or abstains. Deterministic solvers, local LMs and endpoints.

A worker has a ``worker_id`` (its spec: ``solver:<name>`` or an ``agentmill.lm`` spec), a ``fingerprint`` that
changes whenever its answers could (solver source hash; GGUF sha256; endpoint URL + model name; never a key) and
``answer(query, context) -> WorkerResult``. ``answer = None`` is an abstention (scored 0). LM workers also offer
``answer_many`` so a recorder can batch generation.

Solvers [R]: ``arith`` (regex extraction + an AST-restricted evaluator; abstains without an expression), ``string``,
``date`` (stdlib ``datetime``), ``unit`` (a conversion table), ``lookup`` (BM25 over the fact table; abstains below a
score threshold). Helper steps usable only inside workflows: ``numnorm`` (number words → digits and operator
phrases → symbols) and ``decompose`` (regex decomposers of the composite templates).
"""

from __future__ import annotations

import ast
import datetime as _dt
import hashlib
import inspect
import math
import operator
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentmill.envs import route_tasks as rt


@dataclass(frozen=True)
class StepOutput:
    """One earlier workflow step's output as a later step sees it."""

    step: int
    worker: str
    text: str | None


@dataclass(frozen=True)
class WorkerResult:
    """``answer`` (None = abstain), ``cost`` and ``latency`` in seconds, and what was sent (``prompt``)."""

    answer: str | None
    cost: float
    latency: float
    prompt: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class Worker(Protocol):
    worker_id: str
    fingerprint: str

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult: ...


def _source_hash(*objs: Any) -> str:
    h = hashlib.sha256()
    for o in objs:
        h.update(inspect.getsource(o).encode())
    return "src:" + h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------------ arithmetic

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
MAX_MAGNITUDE = 10**18  # router safety: operand magnitude bound
MAX_EXPONENT = 64
MAX_NODES = 64


class UnsafeExpression(ValueError):
    """The expression is outside the evaluator's allowed AST (numbers, + - * / **, parentheses, unary minus)."""


def safe_eval(expr: str) -> float:
    """Evaluate ``expr`` over numbers, ``+ - * / ** ()`` and ``abs(...)`` only: ≤ 64 AST nodes, |exponent| ≤ 64, every operand and
    intermediate |value| ≤ 1e18. No ``eval``; anything else raises :class:`UnsafeExpression`."""
    try:
        tree = ast.parse(expr.replace("×", "*").replace("÷", "/").replace("^", "**"), mode="eval")
    except SyntaxError as e:
        raise UnsafeExpression(f"not an arithmetic expression: {expr!r}") from e
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise UnsafeExpression(f"expression has more than {MAX_NODES} nodes")

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            v = node.value
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "abs"
              and len(node.args) == 1 and not node.keywords):
            v = abs(ev(node.args[0]))  # the one call allowed: a distance between two looked-up numbers
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(b) > MAX_EXPONENT:
                raise UnsafeExpression(f"exponent {b} exceeds {MAX_EXPONENT}")
            if isinstance(node.op, ast.Div) and b == 0:
                raise UnsafeExpression("division by zero")
            v = _BINOPS[type(node.op)](a, b)
        else:
            raise UnsafeExpression(f"disallowed syntax {type(node).__name__}")
        if isinstance(v, complex) or not math.isfinite(v) or abs(v) > MAX_MAGNITUDE:
            raise UnsafeExpression("value out of range")
        return v

    return ev(tree)


_EXPR = re.compile(r"[\d(][\d\s.+\-*/×÷^()]*[\d)]")
_OP = re.compile(r"\d\s*[-+*/×÷^]\s*[\d(]|\)\s*[-+*/×÷^]")


def _fmt(v: float) -> str:
    return str(int(round(v))) if abs(v - round(v)) < 1e-9 else f"{v:.6g}"


class ArithSolver:
    """Finds the longest run of digits and operators containing an operator and evaluates it (:func:`safe_eval`).
    Confident and blind to context: it answers ``'37+58'`` inside a character-counting question too."""

    worker_id = "solver:arith"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(ArithSolver, safe_eval)

    def solve(self, query: str) -> str | None:
        try:  # a bare expression (a workflow's last step) is evaluated whole, abs() included
            return _fmt(safe_eval(query.strip().rstrip("?.").strip()))
        except UnsafeExpression:
            pass
        cands = [m.group(0).strip() for m in _EXPR.finditer(query) if _OP.search(m.group(0))]
        for expr in sorted(cands, key=len, reverse=True):
            try:
                return _fmt(safe_eval(expr))
            except UnsafeExpression:
                continue
        return None

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)  # inside a workflow the subtask already carries the inputs it needs
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


# ------------------------------------------------------------------------------------------------------ strings

_Q = r"'([^']*)'"
_STRING_RULES: list[tuple[re.Pattern, Any]] = [
    (re.compile(r"reverse the word " + _Q, re.I), lambda m: m.group(1)[::-1]),
    (re.compile(r"how many times does the letter '(.)' appear in " + _Q, re.I),
     lambda m: str(m.group(2).count(m.group(1)))),
    (re.compile(r"write " + _Q + r" in uppercase", re.I), lambda m: m.group(1).upper()),
    (re.compile(r"write " + _Q + r" in lowercase", re.I), lambda m: m.group(1).lower()),
    (re.compile(r"first (\d+) letters of " + _Q, re.I), lambda m: m.group(2)[: int(m.group(1))]),
    (re.compile(r"last letter of " + _Q, re.I), lambda m: m.group(1)[-1:] or None),
    (re.compile(r"how many digits are in " + _Q, re.I), lambda m: str(sum(c.isdigit() for c in m.group(1)))),
    (re.compile(r"how many plus signs are in " + _Q, re.I), lambda m: str(m.group(1).count("+"))),
    (re.compile(r"how many (?:letters|characters) (?:are in|does) (?:the (?:word|string|text) )?" + _Q, re.I),
     lambda m: str(len(m.group(1)))),
    (re.compile(r"(?:length of|count the characters in) (?:the (?:word|string|text) )?" + _Q, re.I),
     lambda m: str(len(m.group(1)))),
]


class StringSolver:
    """Regex rules for reverse / count / case / prefix / last letter / length questions; abstains otherwise."""

    worker_id = "solver:string"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(StringSolver) + hashlib.sha256(
            repr([p.pattern for p, _ in _STRING_RULES]).encode()).hexdigest()[:8]

    def solve(self, query: str) -> str | None:
        for pat, fn in _STRING_RULES:
            m = pat.search(query)
            if m:
                return fn(m)
        return None

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


# ------------------------------------------------------------------------------------------------------ dates

_MONTHS = {m.lower(): i + 1 for i, m in enumerate("January February March April May June July August September "
                                                   "October November December".split())}
_ISO = r"(\d{4})-(\d{2})-(\d{2})"
_LONG = r"([A-Z][a-z]+) (\d{1,2}), (\d{4})"
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()


def _parse_dates(text: str) -> list[_dt.date]:
    out: list[tuple[int, _dt.date]] = []
    for m in re.finditer(_ISO, text):
        try:
            out.append((m.start(), _dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))))
        except ValueError:
            pass
    for m in re.finditer(_LONG, text):
        mon = _MONTHS.get(m.group(1).lower())
        if mon:
            try:
                out.append((m.start(), _dt.date(int(m.group(3)), mon, int(m.group(2)))))
            except ValueError:
                pass
    return [d for _, d in sorted(out)]


class DateSolver:
    """Weekday of a date; days between two dates; a date ``n`` days after/before another (stdlib ``datetime``)."""

    worker_id = "solver:date"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(DateSolver, _parse_dates)

    def solve(self, query: str) -> str | None:
        dates = _parse_dates(query)
        q = query.lower()
        if len(dates) == 2 and ("how many days" in q):
            return str(abs((dates[1] - dates[0]).days))
        if len(dates) == 1:
            m = re.search(r"(\d+) days (after|before)", q)
            if m:
                n = int(m.group(1))
                d = dates[0] + _dt.timedelta(days=n if m.group(2) == "after" else -n)
                return d.isoformat()
            if "day of the week" in q or "weekday" in q:
                return _WEEKDAYS[dates[0].weekday()]
        return None

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


# ------------------------------------------------------------------------------------------------------ units

_UNIT_ALIASES = {"km": "km", "kilometre": "km", "kilometer": "km", "mi": "mi", "mile": "mi", "kg": "kg",
                 "kilogram": "kg", "lb": "lb", "pound": "lb", "cm": "cm", "centimetre": "cm", "centimeter": "cm",
                 "in": "in", "inch": "in", "inche": "in", "ft": "ft", "foot": "ft", "feet": "ft", "m": "m",
                 "metre": "m", "meter": "m", "l": "l", "litre": "l", "liter": "l", "gal": "gal", "gallon": "gal",
                 "us gallon": "gal", "celsius": "c", "fahrenheit": "f", "degrees celsius": "c",
                 "degrees fahrenheit": "f"}
_FACTORS = {("km", "mi"): rt.UNIT_FACTORS["km_mi"], ("lb", "kg"): rt.UNIT_FACTORS["lb_kg"],
            ("in", "cm"): rt.UNIT_FACTORS["in_cm"], ("ft", "m"): rt.UNIT_FACTORS["ft_m"],
            ("gal", "l"): rt.UNIT_FACTORS["gal_l"]}


def _unit(word: str) -> str | None:
    w = word.lower().strip()
    for cand in (w, w.rstrip("s"), w[:-2] if w.endswith("es") else w):
        if cand in _UNIT_ALIASES:
            return _UNIT_ALIASES[cand]
    return None


def convert(x: float, src: str, dst: str) -> float | None:
    if (src, dst) == ("c", "f"):
        return x * 9 / 5 + 32
    if (src, dst) == ("f", "c"):
        return (x - 32) * 5 / 9
    if (src, dst) in _FACTORS:
        return x * _FACTORS[(src, dst)]
    if (dst, src) in _FACTORS:
        return x / _FACTORS[(dst, src)]
    return None


_U = r"((?:us |degrees )?[a-z]+)"
_UNIT_RULES = [re.compile(r"convert (-?[\d.]+) " + _U + r" to " + _U, re.I),
               re.compile(r"how many " + _U + r" are (?:in )?(-?[\d.]+) " + _U, re.I)]


class UnitSolver:
    """Unit conversion from a table (km↔mi, lb↔kg, in↔cm, ft↔m, US gal↔l, °C↔°F), answered to 2 decimals."""

    worker_id = "solver:unit"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(UnitSolver, convert, _unit)

    def solve(self, query: str) -> str | None:
        m = _UNIT_RULES[0].search(query)
        if m:
            x, src, dst = m.group(1), _unit(m.group(2)), _unit(m.group(3))
        else:
            m = _UNIT_RULES[1].search(query)
            if not m:
                return None
            x, src, dst = m.group(2), _unit(m.group(3)), _unit(m.group(1))
        try:
            v = convert(float(x), src, dst) if src and dst else None
        except ValueError:
            return None
        return None if v is None else f"{v:.2f}"

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


# ------------------------------------------------------------------------------------------------------ lookup

_STOP = frozenset("what is the of a an in did was which has for how many to and are does do with year".split())


class LookupSolver:
    """BM25 (``core.bm25``) over the fact table's sentences; answers with the part of the best fact the question
    does not already contain (its answer, or its subject for a reverse question), and abstains when the best score
    is below ``min_score`` or the runner-up is too close (``margin``). The table is read only."""

    worker_id = "solver:lookup"

    def __init__(self, min_score: float = 6.0, margin: float = 0.5) -> None:
        from agentmill.core.bm25 import BM25, tokenize
        self._tok = tokenize
        self.facts = rt.facts()
        self.index = BM25([f["text"] for f in self.facts])
        self.min_score, self.margin = min_score, margin
        table = hashlib.sha256(repr(self.facts).encode()).hexdigest()[:8]
        self.fingerprint = f"{_source_hash(LookupSolver)}:{table}:{min_score}:{margin}"

    def solve(self, query: str) -> str | None:
        terms = [t for t in self._tok(query) if t not in _STOP]
        if not terms:
            return None
        top = self.index.top(terms, 2)
        if not top or top[0][1] < self.min_score:
            return None
        if len(top) > 1 and top[0][1] - top[1][1] < self.margin:
            return None
        fact = self.facts[top[0][0]]
        qtok = set(self._tok(query))
        if set(self._tok(fact["answer"])) <= qtok and not set(self._tok(fact["subject"])) <= qtok:
            return fact["subject"]
        return fact["answer"]

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


# ------------------------------------------------------------------------------------------------------ helpers

_WORD_NUM = {w: i for i, w in enumerate(rt.ONES)} | {w: 10 * i for i, w in enumerate(rt.TENS) if w != "_"}
_NUMBER_PHRASE = re.compile(r"\b(?:(?:" + "|".join(sorted(_WORD_NUM, key=len, reverse=True)) +
                            r")(?:[- ](?:hundred|" + "|".join(sorted(_WORD_NUM, key=len, reverse=True)) +
                            r"))*)\b", re.I)
_PHRASES = [(re.compile(r"(\d+) plus (\d+)"), r"\1 + \2"), (re.compile(r"(\d+) times (\d+)"), r"\1 * \2"),
            (re.compile(r"(\d+) minus (\d+)"), r"\1 - \2"),
            (re.compile(r"subtract (\d+) from (\d+)"), r"\2 - \1"),
            (re.compile(r"had (\d+) \w+ and then got (\d+) more"), r"had \1 + \2"),
            (re.compile(r"holds (\d+) (\w+)\. How many \2 are in (\d+) \w+"), r"holds \1 * \3"),
            (re.compile(r"(\d+) (\w+) on \w+ and (\d+) \2"), r"\1 + \3")]


def words_to_int(phrase: str) -> int:
    total = 0
    for part in re.split(r"[- ]", phrase.lower()):
        if part == "hundred":
            total *= 100
        else:
            total += _WORD_NUM[part]
    return total


class NumNorm:
    """Workflow helper: number words → digits, then operator phrases → symbols (hand-written for the
    ``arith_words`` templates: the LLM-free workflow is engineered, not learned). Never abstains."""

    worker_id = "solver:numnorm"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(NumNorm, words_to_int)

    def solve(self, query: str) -> str:
        s = _NUMBER_PHRASE.sub(lambda m: str(words_to_int(m.group(0))), query)
        for pat, rep in _PHRASES:
            s = pat.sub(rep, s)
        return s

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


_DECOMPOSE = [
    (re.compile(r"how many years passed between (.+) and (.+)\?", re.I), "year", "abs({2} - {1})"),
    (re.compile(r"how many years after (.+) did (.+) happen\?", re.I), "year", "{2} - {1}"),
    (re.compile(r"how many years before (.+) was (.+)\?", re.I), "year", "{1} - {2}"),
    (re.compile(r"difference between the atomic numbers of (.+) and (.+)\?", re.I), "z", "abs({1} - {2})"),
    (re.compile(r"sum of the atomic numbers of (.+) and (.+)\?", re.I), "z", "{1} + {2}"),
    (re.compile(r"atomic number of (.+) multiplied by that of (.+)\?", re.I), "z", "{1} * {2}"),
]


class Decompose:
    """Workflow helper: splits a composite question into two lookup questions and a combining expression, as a
    text plan ``q1 || q2 || expr``; ``expr`` names the two answers as steps 1 and 2 of the ``decompose→lookup,lookup→arith`` workflow (``{1}``, ``{2}``); abstains when no composite
    template matches."""

    worker_id = "solver:decompose"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(Decompose) + hashlib.sha256(
            repr([(p.pattern, k, e) for p, k, e in _DECOMPOSE]).encode()).hexdigest()[:8]

    def solve(self, query: str) -> str | None:
        for pat, kind, expr in _DECOMPOSE:
            m = pat.search(query)
            if m:
                a, b = m.group(1).strip(), m.group(2).strip()
                if kind == "year":
                    qs = [f"In what year did {a} take place?", f"In what year did {b} take place?"]
                else:
                    qs = [f"What is the atomic number of {a}?", f"What is the atomic number of {b}?"]
                return " || ".join([*qs, expr])
        return None

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        a = self.solve(query)
        dt = time.perf_counter() - t0
        return WorkerResult(a, dt, dt, query)


class Vote:
    """Workflow helper: the most common non-abstaining answer among its context (ties → the earliest step)."""

    worker_id = "solver:vote"

    def __init__(self) -> None:
        self.fingerprint = _source_hash(Vote)

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        t0 = time.perf_counter()
        votes: dict[str, list[int]] = {}
        for c in context:
            if c.text is not None:
                votes.setdefault(rt.normalise(c.text), []).append(c.step)
        best = None
        if votes:
            key = max(votes, key=lambda k: (len(votes[k]), -min(votes[k])))
            best = next(c.text for c in context if c.text is not None and rt.normalise(c.text) == key)
        dt = time.perf_counter() - t0
        return WorkerResult(best, dt, dt, query)


SOLVERS = {"arith": ArithSolver, "string": StringSolver, "date": DateSolver, "unit": UnitSolver,
           "lookup": LookupSolver}
HELPERS = {"numnorm": NumNorm, "decompose": Decompose, "vote": Vote}


# ------------------------------------------------------------------------------------------------------ LM workers

FEW_SHOT = ("Answer each question with a short answer on one line.\n\n"
            "Q: What is the capital of Italy?\nA: Rome\n\n"
            "Q: What is 12 + 30?\nA: 42\n\n"
            "Q: Is this review positive or negative? 'The soup was cold and bland.'\nA: negative\n\n")
"""The generic 3-shot prompt of the LM workers (one fact, one sum, one label; none of them a RouteTasks query)."""


def lm_prompt(query: str) -> str:
    return f"{FEW_SHOT}Q: {query}\nA:"


def first_line(text: str) -> str | None:
    line = text.strip().split("\n", 1)[0].strip()
    return line or None


class LMWorker:
    """An ``agentmill.lm`` model answering with :data:`FEW_SHOT`, greedy, ≤ ``max_new_tokens`` tokens, first line.
    Cost and latency are wall seconds per query (a batch's wall divided among its queries)."""

    def __init__(self, spec: str, lm: Any = None, *, max_new_tokens: int = 24, batch: int = 8) -> None:
        from agentmill.lm import load_lm
        self.worker_id = spec
        self.lm = lm if lm is not None else load_lm(spec)
        self.max_new_tokens, self.batch = max_new_tokens, batch
        self.decode = {"temperature": 0.0, "max_new_tokens": max_new_tokens, "stop": ["\n"], "prompt": "few_shot_v1",
                       "answer": "first_line"}
        self.fingerprint = lm_fingerprint(spec, self.lm)

    def prompt_for(self, query: str) -> str:
        return lm_prompt(query)

    def answer_many(self, queries: Sequence[str]) -> list[WorkerResult]:
        from agentmill.lm.base import GenerateConfig
        cfg = GenerateConfig(max_new_tokens=self.max_new_tokens, temperature=0.0, stop=("\n",))
        out: list[WorkerResult] = []
        for i in range(0, len(queries), self.batch):
            chunk = list(queries[i: i + self.batch])
            prompts = [lm_prompt(q) for q in chunk]
            t0 = time.perf_counter()
            comps = self.lm.generate(prompts, cfg)
            per = (time.perf_counter() - t0) / len(chunk)
            out += [WorkerResult(first_line(c.text), per, per, p, {"tokens": len(c.token_ids)})
                    for c, p in zip(comps, prompts)]
        return out

    def answer(self, query: str, context: Sequence[StepOutput] = ()) -> WorkerResult:
        if context:
            ctx = "\n".join(f"Note {c.step}: {c.text}" for c in context if c.text)
            query = f"{ctx}\n{query}"
        return self.answer_many([query])[0]


def lm_fingerprint(spec: str, lm: Any) -> str:
    """GGUF sha256 for local GGUF models, ``endpoint:<base_url>#<model>`` for endpoints (no key), else the spec."""
    info = getattr(lm, "info", None) or {}
    if info.get("gguf_sha256"):
        return "gguf:" + info["gguf_sha256"]
    if spec.startswith("openai:"):
        return "endpoint:" + spec[len("openai:"):].split("@", 1)[-1] + "#" + spec[len("openai:"):].split("@", 1)[0]
    return "spec:" + spec


def make_worker(spec: str, lm: Any = None) -> Any:
    """A worker from its spec: ``solver:<name>`` (solvers and helpers) or an ``agentmill.lm`` spec."""
    if spec.startswith("solver:"):
        name = spec.split(":", 1)[1]
        cls = SOLVERS.get(name) or HELPERS.get(name)
        if cls is None:
            raise ValueError(f"unknown solver {name!r}; choose one of {', '.join([*SOLVERS, *HELPERS])}")
        return cls()
    return LMWorker(spec, lm)


def default_pool(lm_spec: str = "hf:smollm2") -> list[str]:
    return [lm_spec, *(f"solver:{n}" for n in SOLVERS)]


__all__ = ["Worker", "WorkerResult", "StepOutput", "ArithSolver", "StringSolver", "DateSolver", "UnitSolver",
           "LookupSolver", "NumNorm", "Decompose", "LMWorker", "make_worker", "safe_eval", "UnsafeExpression",
           "lm_prompt", "FEW_SHOT", "default_pool", "SOLVERS", "HELPERS"]
