"""The FactSearch domain adapter: what a world model needs to simulate the search tool (docs/methods/world_model.md).

Observations are search results (``[i] url`` / ``Title:`` / ``Snippet:`` / ``Date: N/A`` blocks, an optional
"more results" line), pages (``# Title``, ``URL:``, an infobox table, sentences), or an ``Error`` line
(``envs/factsearch.py``). Facts are (slot, field, value) triples: ``("r2", "snippet", …)`` for result 2,
``(title, "born in", "Dorloton")`` for an infobox row. The card is the task's static specification, given to the
world model as the Qwen search prompt's "target query and reference answer" simulation instruction is [C
prompts/search; R content]: the question, its gold answer, and the fact triples of the involved entities, of up to
two entities whose facts name them, and of four distractor entities.

Actions map to Qwen's own search tool names [C prompts/search]: ``web_search: q`` →
``{"name": "web_search", "arguments": {"query": q}}``, ``web_extractor: u`` → ``{"name": "web_extractor",
"arguments": {"url": u}}``; ``answer`` is terminal and judged by the task verifier, never by the world model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.envs.factsearch import MORE_RESULTS, URL_ROOT, FactWorld, Question, contains_answer
from agentmill.methods.world_model.domain import Parsed

_BLOCK = re.compile(r"^\[(\d+)\] (\S+)$")


def action_json(action: str) -> dict[str, Any]:
    """A FactSearch action string as Qwen's tool-call JSON (``answer`` keeps its own name)."""
    name, _, arg = action.partition(":")
    name, arg = name.strip(), arg.strip()
    key = {"web_search": "query", "web_extractor": "url", "answer": "text"}.get(name)
    if key is None:
        return {"name": "command", "arguments": {"text": action}}
    return {"name": name, "arguments": {key: arg}}


def card_entities(world: FactWorld, q: Question, n_distractors: int = 4, n_referring: int = 2) -> list[str]:
    """Involved entities, up to ``n_referring`` entities whose facts name one of them, then ``n_distractors``
    other non-city entities chosen by the question's seed (cities have no facts of their own)."""
    inv = list(q.entities)
    refer = [n for n, e in world.entities.items() if n not in inv and any(v in inv for v in e.attrs.values())]
    rng = np.random.default_rng(derive_seed("factsearch-card", q.qid))
    refer = [refer[int(i)] for i in rng.permutation(len(refer))[:n_referring]]
    rest = [n for n, e in world.entities.items() if n not in inv + refer and e.kind != "city"]
    dis = [rest[int(i)] for i in rng.permutation(len(rest))[:n_distractors]]
    return inv + refer + dis


class FactSearchDomain:
    """FactSearch observations for the world model (module docstring)."""

    name = "factsearch"
    qwen_domain = "search"

    # ---- card ----------------------------------------------------------------------------------------------------
    def card(self, task: tuple[FactWorld, Question]) -> str:
        world, q = task
        lines = [f"Question: {q.text}", f"Answer: {q.answer}", "Facts:"]
        for n in card_entities(world, q):
            e = world.entities[n]
            lines.append(f"{n} ({e.kind}): " + "; ".join(f"{a.replace('_', ' ')} {v}" for a, v in e.attrs.items()))
        return "\n".join(lines)

    # ---- parsing ---------------------------------------------------------------------------------------------------
    def parse(self, obs: str) -> Parsed | None:
        return parse_factsearch(obs)

    def schema_checks(self, p: Parsed) -> list[bool]:
        f = p.fields
        if f["kind"] == "error":
            return [True]
        if f["kind"] == "results":
            idx = [r[0] for r in f["results"]]
            return [idx == list(range(1, len(idx) + 1)), all(r[4] == "N/A" for r in f["results"]), not p.extra]
        return [bool(f["title"]), bool(f["url"]), bool(f["infobox"]), not p.extra]

    def plausibility_checks(self, p: Parsed, card: str | None, window: Sequence[str]) -> list[bool]:
        """URLs under ``wiki.example`` whose slug is the title; titles of card entities when a card is given [R]."""
        f = p.fields
        if f["kind"] == "error":
            return [True]
        pairs = [(r[1], r[2]) for r in f["results"]] if f["kind"] == "results" else [(f["url"], f["title"])]
        checks = [u.startswith(URL_ROOT) for u, _ in pairs]
        checks += [u.startswith(URL_ROOT + "news/") or u == URL_ROOT + t.replace(" ", "_") for u, t in pairs]
        if card:
            known = {ln.split(" (")[0] for ln in card.splitlines()[3:]}
            checks += [t in known or t.startswith("News: ") for _, t in pairs]
        return checks or [True]

    def consistency_conflicts(self, p: Parsed, window: Sequence[str]) -> tuple[int, int]:
        """A page already seen in the window must render the same infobox [R]."""
        conflicts = checked = 0
        if p.fields["kind"] != "page":
            return 0, 0
        for w in window:
            q = self.parse(w)
            if q is None or q.fields["kind"] != "page" or q.fields["title"] != p.fields["title"]:
                continue
            checked += 1
            conflicts += q.fields["infobox"] != p.fields["infobox"]
        return conflicts, checked

    # ---- reasoning -------------------------------------------------------------------------------------------------
    def reasoning(self, action: str, obs: str, next_obs: str, diff: Sequence[str], check: int | None) -> str:
        """The retrieval trace in words (which pages match, which sentence is the snippet, which control applies);
        ``diff`` holds those trace lines [R]."""
        return "\n".join([f"Action: {action}."] + [f"Trace: {d}." for d in diff])

    # ---- simulator hooks -------------------------------------------------------------------------------------------
    def outcome_from_observation(self, obs: str, action: str) -> tuple[float, bool]:
        if "Your answer is correct." in obs:
            return 1.0, True
        if "Your answer is wrong." in obs:
            return 0.0, True
        return 0.0, False

    def admissible_from_text(self, obs: str, card: str | None) -> list[str]:
        """Extractor commands for the URLs the (simulated) text lists (searches and answers need the question; the
        simulator adds them)."""
        return sorted({f"web_extractor: {u}" for u in re.findall(r"https://wiki\.example/\S+", obs)})


def parse_factsearch(obs: str) -> Parsed | None:
    """Typed fields and facts of a FactSearch observation, or None when it is none of results/page/error."""
    lines = tuple(ln.rstrip() for ln in obs.strip().splitlines())
    nonblank = tuple(ln for ln in lines if ln.strip())
    if not nonblank:
        return None
    if nonblank[0].startswith("Error"):
        return Parsed({"kind": "error", "error": nonblank[0]}, frozenset({("tool", "error", nonblank[0])}),
                      nonblank, tuple(nonblank[1:]))
    if nonblank[0] == "No results found.":
        return Parsed({"kind": "results", "results": [], "more": False},
                      frozenset({("search", "results", "none")}), nonblank, tuple(nonblank[1:]))
    if _BLOCK.match(nonblank[0]):
        results, extra, more, i = [], [], False, 0
        while i < len(nonblank):
            m = _BLOCK.match(nonblank[i])
            if m and i + 3 < len(nonblank) and nonblank[i + 1].startswith("Title: ") \
                    and nonblank[i + 2].startswith("Snippet: ") and nonblank[i + 3].startswith("Date: "):
                results.append((int(m.group(1)), m.group(2), nonblank[i + 1][7:], nonblank[i + 2][9:],
                                nonblank[i + 3][6:]))
                i += 4
            elif nonblank[i] == MORE_RESULTS:
                more, i = True, i + 1
            else:
                extra.append(nonblank[i])
                i += 1
        facts = set()
        for k, u, t, s, _d in results:
            facts |= {(f"r{k}", "url", u), (f"r{k}", "title", t), (f"r{k}", "snippet", s)}
        if more:
            facts.add(("search", "more", "yes"))
        return Parsed({"kind": "results", "results": results, "more": more}, frozenset(facts), nonblank,
                      tuple(extra))
    if nonblank[0].startswith("# "):
        title = nonblank[0][2:].strip()
        url, box, sents, extra = "", [], [], []
        for ln in nonblank[1:]:
            if ln.startswith("URL: "):
                url = ln[5:].strip()
            elif ln.startswith("|"):
                cells = [c.strip() for c in ln.strip("|").split("|")]
                if len(cells) == 2 and cells[0] not in ("field", "---"):
                    box.append((cells[0], cells[1]))
                elif len(cells) != 2:
                    extra.append(ln)
            elif ln.endswith("."):
                sents.append(ln)
            else:
                extra.append(ln)
        facts = {(title, "url", url)} | {(title, k, v) for k, v in box} | {(title, "sentence", s) for s in sents}
        return Parsed({"kind": "page", "title": title, "url": url, "infobox": tuple(box), "sentences": sents},
                      frozenset(facts), nonblank, tuple(extra))
    return None


def snippets(obs: str | None) -> list[str]:
    """The snippet lines of a (predicted) results observation."""
    p = parse_factsearch(obs) if obs else None
    if p is None or p.fields["kind"] != "results":
        return []
    return [r[3] for r in p.fields["results"]]


def leaks(obs: str | None, answer: str) -> bool:
    """True when some snippet of ``obs`` contains the (normalised) gold answer."""
    return any(contains_answer(s, answer) for s in snippets(obs))
