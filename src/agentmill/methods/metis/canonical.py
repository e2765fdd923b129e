"""Query → canonical pattern: slot abstraction with the world's entity lexicon, phrasing normalisation, and an
optional BM25 merge of near keys (:mod:`agentmill.core.bm25`) [R]. The paper does not define "query pattern"."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agentmill.envs.appsim import MONTH_NAMES, PAYMENT_METHODS
from agentmill.methods.metis.records import Pattern

FILLERS = ("show", "could you tell me the", "could you tell me", "please tell me the", "please tell me", "please",
           "what was the", "what is the", "list the", "show me what", "so far", "current", "my", "calendar",
           "there", "are", "were", "was")
"""Words and phrases dropped before comparing phrasings (politeness, question framing)."""
SYNONYMS = (("how much i transferred out to", "total sent to"),
            ("how much i got transferred in from", "total received from"), ("transferred out", "sent"),
            ("transferred in", "received"), ("how many", "number of"), ("biggest", "largest"),
            ("which contact got my", "who received my"), ("which contact gave me the", "who sent me the"),
            ("gave me", "sent me"), ("got my", "received my"), ("everybody", "everyone"), ("schedule", "create"),
            ("remove", "delete"), ("ask for", "request"), ("transfer", "send"), ("change", "set"), ("make", "create"),
            ("write note titled", "note titled"), ("order", "buy"), ("and pay with", "with"), ("put", "add"),
            ("into", "to"), ("total i spent", "total spent"), ("have i placed", "placed"),
            ("payments were", "payments"))
"""Phrase rewrites applied in order after slot abstraction (the lexicon of the query language)."""

_MONTH = re.compile(r"\b(" + "|".join(MONTH_NAMES) + r") (\d{4})\b", re.I)
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_TIME = re.compile(r"\b(\d{1,2}:\d{2})\b")
_AMOUNT = re.compile(r"\$(\d+(?:\.\d+)?)")
_QUOTED = re.compile(r'"([^"]*)"')
_INT = re.compile(r"\b(\d{1,3})\b")


def _alternation(words: Sequence[str]) -> re.Pattern | None:
    """One regex matching any of ``words`` (lower-case, whole words, longest first)."""
    ws = sorted({w.lower() for w in words}, key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(re.escape(w) for w in ws) + r")\b") if ws else None


class PatternCanonicaliser:
    """``canonicalise(query) → Pattern``. Entities found with the lexicon become typed slots named by type
    (``{date}``, ``{date2}`` for the second of a type); fillers are dropped and synonyms rewritten; with
    ``merge="bm25"`` a new key is mapped onto the most similar earlier key when its relative BM25 score reaches
    ``merge_threshold``."""

    def __init__(self, contacts: Iterable[str] = (), products: Iterable[str] = (), *, merge: str = "exact",
                 merge_threshold: float = 0.8) -> None:
        self.contacts = sorted(set(contacts), key=len, reverse=True)
        self.products = sorted(set(products), key=len, reverse=True)
        self.merge, self.merge_threshold = merge, merge_threshold
        self._contact_re, self._product_re, self._method_re = (_alternation(self.contacts), _alternation(self.products),
                                                               _alternation(PAYMENT_METHODS))
        self.keys: list[str] = []
        self._merged: dict[str, str] = {}

    def canonicalise(self, query: str) -> Pattern:
        found: list[tuple[int, int, str, object]] = []  # (start, end, type, value)
        taken = [False] * len(query)

        def grab(regex: re.Pattern, kind: str, conv) -> None:
            for m in regex.finditer(query):
                if any(taken[m.start():m.end()]):
                    continue
                found.append((m.start(), m.end(), kind, conv(m)))
                for i in range(m.start(), m.end()):
                    taken[i] = True

        def lex(regex: re.Pattern | None, kind: str) -> None:
            if regex is None:
                return
            for m in regex.finditer(query.lower()):
                if not any(taken[m.start():m.end()]):
                    found.append((m.start(), m.end(), kind, query[m.start():m.end()]))
                    for i in range(m.start(), m.end()):
                        taken[i] = True

        for m in _QUOTED.finditer(query):
            before = query[:m.start()].lower().rstrip()
            kind = "title" if before.endswith(("titled", "called", "event")) else "text"
            found.append((m.start(), m.end(), kind, m.group(1)))
            for i in range(m.start(), m.end()):
                taken[i] = True
        grab(_MONTH, "month", lambda m: f"{m.group(2)}-{MONTH_NAMES.index(m.group(1).capitalize()) + 1:02d}")
        grab(_DATE, "date", lambda m: m.group(1))
        grab(_TIME, "time", lambda m: m.group(1))
        grab(_AMOUNT, "amount", lambda m: float(m.group(1)))
        lex(self._contact_re, "contact")
        lex(self._product_re, "product")
        lex(self._method_re, "payment_method")
        grab(_INT, "qty", lambda m: int(m.group(1)))
        found.sort()
        counts: dict[str, int] = {}
        slots = []
        out, pos = [], 0
        for start, end, kind, value in found:
            counts[kind] = counts.get(kind, 0) + 1
            name = kind if counts[kind] == 1 else f"{kind}{counts[kind]}"
            slots.append((name, kind, value))
            out.append(query[pos:start])
            out.append("{" + name + "}")
            pos = end
        out.append(query[pos:])
        key = self.normalise("".join(out))
        return Pattern(self._merge(key), tuple(slots))

    @staticmethod
    def normalise(text: str) -> str:
        t = text.lower()
        t = re.sub(r"[?!.,]", " ", t)
        t = " " + re.sub(r"\s+", " ", t).strip() + " "
        for a, b in SYNONYMS:
            t = t.replace(" " + a + " ", " " + b + " ")
        for f in FILLERS:
            t = t.replace(" " + f + " ", " ")
        return re.sub(r"\s+", " ", t).strip()

    def _merge(self, key: str) -> str:
        if key in self._merged:
            return self._merged[key]
        if self.merge == "bm25" and self.keys:
            from agentmill.core.bm25 import BM25

            bm = BM25(self.keys + [key])
            sc = bm.scores(key)
            self_score = sc[-1]
            best = int(sc[:-1].argmax())
            slots_of = sorted(re.findall(r"\{\w+\}", key))
            if self_score > 0 and sc[best] / self_score >= self.merge_threshold and \
                    sorted(re.findall(r"\{\w+\}", self.keys[best])) == slots_of:
                self._merged[key] = self.keys[best]
                return self.keys[best]
        self._merged[key] = key
        self.keys.append(key)
        return key
