"""FactSearch: a fictional encyclopedia behind a search tool, for search-agent and world-model work [R].

A :class:`FactWorld` is generated from a seed: fictional persons, companies, cities and products (names from a
seeded syllable generator), each with one page under ``https://wiki.example/`` (RFC 2606 reserved: never
resolvable), plus a few news pages that mention two entities. Questions ask for one attribute (one hop) or for an
attribute of an entity named by another attribute (two hops: "Where was the founder of X born?").

:class:`FactSearchEnv` is a ``TextEnv`` with three string actions:

- ``web_search: <query>`` — Okapi BM25 (``core.bm25``, k1 = 1.5, b = 0.75) over page text; the top results in the
  search layout of the Qwen-AgentWorld search prompt (``[i] url``, ``Title:``, ``Snippet:``, ``Date: N/A``, blank
  line) [C prompts/search, layout only]; the snippet is the page sentence sharing the most query terms, so one-hop
  answers often appear in snippets (the "lucky snippet" real engines offer);
- ``web_extractor: <url>`` — the page (an unknown URL gives the error page);
- ``answer: <text>`` — ends the episode; reward 1 for a normalised exact match with the gold answer, else 0.

Controls (the steering transforms a world model learns to obey, and the ``programmatic-stingy`` env):
``stingy`` (a snippet that contains the gold answer is replaced by the page's lead sentence, or by "No preview
available." when that names the answer too), ``page_size`` (results
shown, then a "more results" line), ``error_rate`` (the generic service-error observation instead of a tool result,
drawn by the env's own rng). Bad input (an empty or oversized query, an unknown tool) gives an ``Error:``
observation, never an exception. Imports only ``core``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from agentmill.core.bm25 import BM25, tokenize
from agentmill.core.seeding import derive_seed

URL_ROOT = "https://wiki.example/"
SERVICE_ERROR = "Error: the search service is temporarily unavailable (code 503). Please retry."
"""The generic service-error observation (``InjectError``)."""
NO_PREVIEW = "No preview available."
"""The stingy snippet of a page whose lead sentence also names the answer (a news page)."""
MORE_RESULTS = "[More results available on the next page]"
TOOLS_LINE = "Tools: web_search: <query> | web_extractor: <url> | answer: <text>"
KINDS = ("person", "company", "city", "product")
OCCUPATIONS = ("engineer", "painter", "chemist", "pilot", "architect", "violinist", "botanist", "cartographer",
               "glassblower", "surveyor")

_SYL = ("ka", "lo", "mi", "ren", "dor", "vash", "tel", "qui", "zan", "bro", "fen", "sil", "mar", "tob", "ul", "ny",
        "gre", "pol", "stra", "vin", "wex", "hal", "jor", "dre", "osk", "pim", "rav", "sul", "tor", "yel")
_BLOCK = frozenset({"karen", "mary", "tom", "paris", "london", "milo", "maria", "dora", "nike", "lola", "molo",
                    "tobu", "polo", "marka"})
"""Real-looking words the name generator rejects [R]."""

# attribute -> (subject kind, value kind, search keyword, three sentence phrasings) [R]
ATTRS: dict[str, tuple[str, str, str, tuple[str, str, str]]] = {
    "born_in": ("person", "city", "birthplace",
                ("{s} was born in {v}.", "{s} grew up in {v}, the city of their birth.", "The birthplace of {s} is {v}.")),
    "birth_year": ("person", "year", "birth year",
                   ("{s} was born in the year {v}.", "{s} came into the world in {v}.", "The birth year of {s} is {v}.")),
    "occupation": ("person", "occupation", "occupation",
                   ("{s} works as a {v}.", "By profession, {s} is a {v}.", "{s} is known as a {v}.")),
    "founded_year": ("company", "year", "founded",
                     ("{s} was founded in {v}.", "{s} opened its doors in {v}.", "The founding year of {s} is {v}.")),
    "headquarters": ("company", "city", "headquarters",
                     ("{s} is headquartered in {v}.", "The head office of {s} is in {v}.",
                      "{s} runs its business from {v}.")),
    "founder": ("company", "person", "founder",
                ("{s} was founded by {v}.", "{v} started {s}.", "The founder of {s} is {v}.")),
    "maker": ("product", "company", "maker",
              ("{s} is made by {v}.", "{v} manufactures {s}.", "The maker of {s} is {v}.")),
    "release_year": ("product", "year", "released",
                     ("{s} was released in {v}.", "{s} first went on sale in {v}.", "The release year of {s} is {v}.")),
}

# question templates: attribute (or "hop1.hop2") -> (train phrasing, test phrasing) [R]
QUESTIONS: dict[str, tuple[str, str]] = {
    "born_in": ("In which city was {s} born?", "Where is the birthplace of {s}?"),
    "birth_year": ("In what year was {s} born?", "What is the birth year of {s}?"),
    "occupation": ("What is the occupation of {s}?", "What does {s} do for a living?"),
    "founded_year": ("In what year was {s} founded?", "When was {s} founded?"),
    "headquarters": ("Where is {s} headquartered?", "In which city is the head office of {s}?"),
    "founder": ("Who founded {s}?", "Who is the founder of {s}?"),
    "maker": ("Which company makes {s}?", "Who is the maker of {s}?"),
    "release_year": ("In what year was {s} released?", "When was {s} released?"),
    "founder.born_in": ("Where was the founder of {s} born?", "In which city was the person who founded {s} born?"),
    "founder.birth_year": ("In what year was the founder of {s} born?", "When was the founder of {s} born?"),
    "maker.headquarters": ("Where is the maker of {s} headquartered?",
                           "In which city is the company that makes {s} based?"),
    "maker.founded_year": ("In what year was the maker of {s} founded?", "When was the company that makes {s} founded?"),
}
_DISTRACT = ("{s} appears in several local records.", "Little else is documented about {s}.",
             "Visitors sometimes ask about {s}.", "{s} is listed in the regional directory.")
_LEAD = "{s} is a {kind} in this fictional encyclopedia."


def normalise(text: str) -> str:
    """Lower case, punctuation dropped, articles dropped, spaces collapsed (the answer-matching rule)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return " ".join(w for w in words if w not in ("a", "an", "the"))


def contains_answer(text: str, answer: str) -> bool:
    """True when the normalised ``answer`` occurs in the normalised ``text`` as whole words."""
    gold = normalise(answer)
    return bool(gold) and f" {gold} " in f" {normalise(text)} "


@dataclass(frozen=True)
class Entity:
    name: str
    kind: str
    attrs: dict[str, str]

    @property
    def url(self) -> str:
        return URL_ROOT + self.name.replace(" ", "_")


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    lead: str
    sentences: tuple[str, ...]
    infobox: tuple[tuple[str, str], ...]

    def render(self) -> str:
        rows = "\n".join(f"| {k} | {v} |" for k, v in self.infobox)
        return (f"# {self.title}\nURL: {self.url}\n\n| field | value |\n|---|---|\n{rows}\n\n"
                + "\n".join((self.lead,) + self.sentences))


@dataclass(frozen=True)
class Question:
    """One task: ``chain`` is the attribute path (one or two hops); ``entities`` the subject, then the middle
    entity of a two-hop question; ``hard`` = two hops and no snippet of any entity-and-keyword search states the
    answer."""

    qid: str
    text: str
    answer: str
    chain: tuple[str, ...]
    entities: tuple[str, ...]
    answer_kind: str
    hard: bool = False

    @property
    def hops(self) -> int:
        return len(self.chain)


def _name(rng: np.random.Generator, n_syl: int) -> str:
    while True:
        w = "".join(_SYL[int(rng.integers(len(_SYL)))] for _ in range(n_syl))
        if w not in _BLOCK:
            return w.capitalize()


@dataclass
class FactWorld:
    """A generated fictional world: entities, pages, a BM25 index, and its questions."""

    seed: int
    entities: dict[str, Entity]
    pages: dict[str, Page]
    phrasing: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def generate(cls, seed: int, n_entities: int = 60, n_news: int = 10) -> FactWorld:
        """Deterministic by ``seed``: a quarter each of persons, companies, cities, products (at least 2 each)."""
        if n_entities < 8:
            raise ValueError(f"a FactWorld needs n_entities >= 8, got {n_entities}")
        rng = np.random.default_rng(derive_seed("factworld", seed))
        per = {k: max(2, n_entities // 4) for k in KINDS}
        names: set[str] = set()
        by_kind: dict[str, list[str]] = {k: [] for k in KINDS}
        suffix = {"company": (" Corp", " Works", " Labs", " Group"), "city": ("", "ton", "ford", "port")}
        for kind in KINDS:
            while len(by_kind[kind]) < per[kind]:
                if kind == "person":
                    nm = f"{_name(rng, 2)} {_name(rng, 2)}"
                elif kind == "company":
                    nm = _name(rng, 2) + suffix["company"][int(rng.integers(4))]
                elif kind == "city":
                    nm = _name(rng, 2) + suffix["city"][int(rng.integers(4))]
                else:
                    nm = f"{_name(rng, 2)} {int(rng.integers(2, 10)) * 100}"
                if nm.lower() in names or any(nm.lower() in o or o in nm.lower() for o in names):
                    continue
                names.add(nm.lower())
                by_kind[kind].append(nm)
        ents: dict[str, Entity] = {}
        pick = lambda kind: by_kind[kind][int(rng.integers(len(by_kind[kind])))]  # noqa: E731
        for nm in by_kind["city"]:
            ents[nm] = Entity(nm, "city", {})
        for nm in by_kind["person"]:
            ents[nm] = Entity(nm, "person", {"born_in": pick("city"), "birth_year": str(int(rng.integers(1900, 2000))),
                                             "occupation": OCCUPATIONS[int(rng.integers(len(OCCUPATIONS)))]})
        for nm in by_kind["company"]:
            ents[nm] = Entity(nm, "company", {"founded_year": str(int(rng.integers(1900, 2021))),
                                              "headquarters": pick("city"), "founder": pick("person")})
        for nm in by_kind["product"]:
            ents[nm] = Entity(nm, "product", {"maker": pick("company"),
                                              "release_year": str(int(rng.integers(1950, 2024)))})
        pages: dict[str, Page] = {}
        phrasing: dict[tuple[str, str], int] = {}
        for e in ents.values():
            sents = []
            for a, v in e.attrs.items():
                k = int(rng.integers(3))
                phrasing[(e.name, a)] = k
                sents.append(ATTRS[a][3][k].format(s=e.name, v=v))
            order = rng.permutation(len(_DISTRACT))[:2]
            sents += [_DISTRACT[int(i)].format(s=e.name) for i in order]
            box = (("type", e.kind),) + tuple((a.replace("_", " "), v) for a, v in e.attrs.items())
            pages[e.url] = Page(e.url, e.name, _LEAD.format(s=e.name, kind=e.kind), tuple(sents), box)
        pool = [n for n in ents if ents[n].kind != "city"]
        for i in range(n_news):
            a, b = (pool[int(j)] for j in rng.permutation(len(pool))[:2])
            year = int(rng.integers(1950, 2024))
            url = f"{URL_ROOT}news/{i}"
            pages[url] = Page(url, f"News: {a} and {b}", f"This news page mentions {a} and {b}.",
                              (f"{a} and {b} were both mentioned at a trade fair in {year}.",
                               f"Reporters covered {a} again in {year + 1}."), (("type", "news"),))
        return cls(seed, ents, pages, phrasing)

    # ---- search ----------------------------------------------------------------------------------------------------
    @cached_property
    def _urls(self) -> list[str]:
        return list(self.pages)

    @cached_property
    def index(self) -> BM25:
        docs = []
        for u in self._urls:
            p = self.pages[u]
            docs.append(" ".join([p.title, p.lead, *p.sentences, *(f"{k} {v}" for k, v in p.infobox)]))
        return BM25(docs, k1=1.5, b=0.75)

    def search(self, query: str, k: int = 5) -> list[tuple[str, str, str]]:
        """The top ``k`` (url, title, snippet) with a positive score; the snippet is the sentence sharing the most
        distinct query terms (the earlier one on ties; the lead sentence when none shares a term)."""
        q = set(tokenize(query))
        out = []
        for i, s in self.index.top(query, k=min(k, len(self._urls))):
            if s <= 0:
                break
            p = self.pages[self._urls[i]]
            sents = (p.lead,) + p.sentences
            overlap = [len(q & set(tokenize(x))) for x in sents]
            best = int(np.argmax(overlap))
            out.append((p.url, p.title, sents[best]))
        return out

    # ---- questions -------------------------------------------------------------------------------------------------
    def questions(self, phrasing: str = "train") -> list[Question]:
        """Every question of the world, one-hop and two-hop, with the ``train`` or ``test`` phrasing templates."""
        if phrasing not in ("train", "test"):
            raise ValueError(f"phrasing must be 'train' or 'test', got {phrasing!r}")
        j = 0 if phrasing == "train" else 1
        out = []
        for e in self.entities.values():
            for key, tmpl in QUESTIONS.items():
                chain = tuple(key.split("."))
                if ATTRS[chain[0]][0] != e.kind:
                    continue
                mid = e.attrs[chain[0]]
                ans = mid if len(chain) == 1 else self.entities[mid].attrs[chain[1]]
                ents = (e.name,) if len(chain) == 1 else (e.name, mid)
                kind = ATTRS[chain[-1]][1]
                q = Question(f"w{self.seed}:{e.name}:{key}", tmpl[j].format(s=e.name), ans, chain, ents, kind)
                if len(chain) == 2:
                    q = replace(q, hard=not any(contains_answer(s, ans) for qq in self.entity_queries(q)
                                                for _, _, s in self.search(qq)))
                out.append(q)
        return out

    def entity_queries(self, q: Question, names: Sequence[str] | None = None) -> list[str]:
        """Search queries built from entity names (the question's, or ``names``), alone and with each keyword of
        the question's chain."""
        kws = [ATTRS[a][2] for a in q.chain]
        out = []
        for n in (q.entities if names is None else names):
            out.append(n)
            out += [f"{n} {k}" for k in kws]
        return out

    def oracle_plan(self, q: Question) -> list[str]:
        """Search each entity of the chain, open its page, then answer: every question is answerable this way."""
        plan = []
        for n in q.entities:
            plan += [f"web_search: {n}", f"web_extractor: {self.entities[n].url}"]
        return plan + [f"answer: {q.answer}"]

    def facts(self, names: Sequence[str]) -> list[tuple[str, str, str]]:
        """(entity, attribute, value) triples of the named entities."""
        return [(n, a, v) for n in names for a, v in self.entities[n].attrs.items()]

    def typed_spans(self, text: str, kind: str) -> list[str]:
        """Spans of ``kind`` in ``text``: years by regex, occupations from their list, names from the world
        lexicon."""
        if kind == "year":
            return sorted(set(re.findall(r"\b(1[89]\d\d|20\d\d)\b", text)))
        if kind == "occupation":
            return sorted({o for o in OCCUPATIONS if re.search(rf"\b{o}\b", text)})
        return sorted({n for n, e in self.entities.items() if e.kind == kind and n in text})


@dataclass(frozen=True)
class FactSearchConfig:
    """Env settings (defaults [R]; ``max_steps=6`` leaves one spare step over a two-hop oracle plan)."""

    n_entities: int = 60
    """Entities per world (a quarter of each kind)."""
    n_news: int = 10
    """News pages mentioning two entities."""
    page_size: int = 5
    """Search results shown; more are announced by a "more results" line (``Paginate(k)``)."""
    stingy: bool = False
    """Replace any snippet containing the gold answer by an answer-free line (``Stingy``)."""
    error_rate: float = 0.0
    """Probability that a tool call returns the generic service error instead (``InjectError``)."""
    max_steps: int = 6
    """Steps before truncation."""
    max_query_chars: int = 512
    """Longer queries (and URLs) are refused with an error observation."""
    fetch: int = 10
    """Results retrieved before the page cut (so the "more results" line is truthful)."""


def render_results(results: Sequence[tuple[str, str, str]], *, page_size: int, more: bool) -> str:
    if not results:
        return "No results found."
    blocks = [f"[{i}] {u}\nTitle: {t}\nSnippet: {s}\nDate: N/A\n" for i, (u, t, s) in
              enumerate(results[:page_size], 1)]
    return "\n".join(blocks) + (f"\n{MORE_RESULTS}" if more else "")


def apply_control(results: Sequence[tuple[str, str, str]], world: FactWorld, question: Question, *,
                  stingy: bool = False, page_size: int = 5) -> str:
    """The programmatic steering transforms on raw search results, rendered (the same code the steered world model
    learns from and the ``programmatic-stingy`` env uses)."""
    res = list(results)
    if stingy:
        res = [(u, t, s if not contains_answer(s, question.answer) else world.pages[u].lead
                if not contains_answer(world.pages[u].lead, question.answer) else NO_PREVIEW) for u, t, s in res]
    return render_results(res, page_size=page_size, more=len(res) > page_size)


def candidate_actions(world: FactWorld, question: Question, seen: Sequence[str]) -> list[str]:
    """The admissible commands after the observations ``seen`` (the first is the question): searches for the
    question's subject and every entity named so far (alone and with each chain keyword), the extractor for every
    URL in the last observation (unless it is a page), and ``answer`` for every span of the answer's type seen in a
    tool output; sorted and deterministic, so a linear policy can act."""
    q, w = question, world
    text = "\n".join(seen)
    named = w.typed_spans(text, "person") + w.typed_spans(text, "company") + w.typed_spans(text, "product")
    names = [q.entities[0]] + [n for n in named if n != q.entities[0]]  # never the hidden middle entity
    cmds = {f"web_search: {s}" for s in w.entity_queries(q, names)}
    last = seen[-1] if seen else ""
    if not last.startswith("# "):
        cmds |= {f"web_extractor: {u}" for u in re.findall(r"https://wiki\.example/\S+", last)}
    cmds |= {f"answer: {s}" for s in w.typed_spans("\n".join(seen[1:]), q.answer_kind)}
    return sorted(cmds)


class FactSearchEnv:
    """One question of one world as a ``TextEnv`` (module docstring). ``info`` passes ``envs.base.check_info``."""

    def __init__(self, world: FactWorld, question: Question, config: FactSearchConfig = FactSearchConfig()) -> None:
        if config.page_size < 1 or not 0.0 <= config.error_rate <= 1.0 or config.max_steps < 1:
            raise ValueError("FactSearchConfig needs page_size >= 1, 0 <= error_rate <= 1, max_steps >= 1")
        self.world, self.question, self.config = world, question, config
        self._t = 0
        self._seen: list[str] = []
        self._done = True
        self._rng = np.random.default_rng(0)
        self._plan = world.oracle_plan(question)

    @property
    def task_id(self) -> str:
        return self.question.qid

    def initial_observation(self) -> str:
        return f"Question: {self.question.text}\n{TOOLS_LINE}"

    def admissible_commands(self) -> list[str]:
        """:func:`candidate_actions` of this episode so far."""
        return candidate_actions(self.world, self.question, self._seen)

    def _info(self, *, won: bool, invalid: bool, feedback: str, done: bool) -> dict[str, Any]:
        k = min(self._t, len(self._plan))
        return {"admissible_commands": [] if done else self.admissible_commands(), "won": won, "lost": False,
                "task_id": self.task_id, "step": self._t, "invalid_action": invalid, "feedback": feedback,
                "question": self.question.text,
                "oracle": {"distance_to_goal": None, "state_id": None, "dead_end": False,
                           "plan_commands": [self._plan[k]] if k < len(self._plan) else []}}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        self._rng = np.random.default_rng(derive_seed("factsearch-env", self.task_id, seed))
        self._t, self._done = 0, False
        obs = self.initial_observation()
        self._seen = [obs]
        return obs, self._info(won=False, invalid=False, feedback="", done=False)

    def tool_output(self, action: str) -> tuple[str, bool]:
        """(observation, invalid) of a non-terminal action, before the error control."""
        name, sep, arg = action.partition(":")
        name, arg = name.strip(), arg.strip()
        cfg = self.config
        if not sep or name not in ("web_search", "web_extractor"):
            return ("Error: unknown tool. Use 'web_search: <query>', 'web_extractor: <url>' or 'answer: <text>'.",
                    True)
        if not arg:
            return f"Error: {name} needs an argument.", True
        if len(arg) > cfg.max_query_chars:
            return f"Error: argument too long ({len(arg)} characters; the limit is {cfg.max_query_chars}).", True
        if name == "web_extractor":
            page = self.world.pages.get(arg)
            if page is None:
                return f"Error 404: no page at {arg[:200]}.", True
            return page.render(), False
        if not tokenize(arg):
            return "Error: the query has no searchable words.", True
        res = self.world.search(arg, k=max(cfg.fetch, cfg.page_size))
        return apply_control(res, self.world, self.question, stingy=cfg.stingy, page_size=cfg.page_size), False

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("FactSearchEnv.step called before reset() or after the episode ended")
        if not isinstance(action, str):
            raise TypeError(f"actions are strings, got {type(action).__name__}")
        self._t += 1
        name, _, arg = action.partition(":")
        if name.strip() == "answer":
            won = normalise(arg) == normalise(self.question.answer) and bool(normalise(arg))
            obs = "Your answer is correct." if won else "Your answer is wrong."
            self._done = True
            return obs, float(won), True, False, self._info(won=won, invalid=False, feedback=obs, done=True)
        if self.config.error_rate > 0 and self._rng.random() < self.config.error_rate:
            obs, invalid = SERVICE_ERROR, False
        else:
            obs, invalid = self.tool_output(action)
        self._seen.append(obs)
        trunc = self._t >= self.config.max_steps
        self._done = trunc
        fb = obs if obs.startswith("Error") else ""
        return obs, 0.0, False, trunc, self._info(won=False, invalid=invalid, feedback=fb, done=trunc)

    def close(self) -> None:
        self._done = True


def make_factsearch(world_seed: int = 0, question: int = 0, phrasing: str = "train", **kw: Any) -> FactSearchEnv:
    """``make("factsearch-v0", world_seed=3, question=5)``: question ``question`` (modulo the world's count)."""
    world_kw = {k: kw.pop(k) for k in ("n_entities", "n_news") if k in kw}
    cfg = FactSearchConfig(**world_kw, **kw)
    world = FactWorld.generate(world_seed, cfg.n_entities, cfg.n_news)
    qs = world.questions(phrasing)
    return FactSearchEnv(world, qs[question % len(qs)], cfg)


def make_factsearch_stingy(world_seed: int = 0, question: int = 0, phrasing: str = "train",
                           **kw: Any) -> FactSearchEnv:
    """The programmatic-stingy env: answer-free snippets, three results per page."""
    kw.setdefault("page_size", 3)
    return make_factsearch(world_seed, question, phrasing, stingy=True, **kw)
