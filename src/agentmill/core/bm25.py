"""Okapi BM25 over a small in-memory corpus (numpy only).

Used where a method needs lexical retrieval without a search engine: merging near-identical memory keys (Metis),
the router's fact lookup, and a world model's fact search. The scoring is the textbook Okapi form with the
non-negative idf of Lucene, ``idf(t) = ln(1 + (N - n_t + 0.5) / (n_t + 0.5))``, and the usual defaults k1 = 1.5,
b = 0.75 (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009, §3.3 gives
k1 in [1.2, 2.0] and b = 0.75 as the customary values). ``rank_bm25``'s ``BM25Okapi`` differs only in its idf floor;
the tests compare rankings with it on corpora where no term occurs in more than half the documents.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs: ``"Total sent to {contact}!"`` -> ``["total", "sent", "to", "contact"]``."""
    return _WORD.findall(text.lower())


class BM25:
    """An immutable BM25 index over ``docs`` (strings, tokenised by :func:`tokenize`, or token lists).

    ``scores(query)`` returns one score per document, in corpus order; ``top(query, k)`` the best ``k`` as
    ``(index, score)`` pairs, ties broken by the lower index so results are deterministic.
    """

    def __init__(self, docs: Sequence[str] | Sequence[Sequence[str]], *, k1: float = 1.5, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b = float(k1), float(b)
        self.docs: list[list[str]] = [tokenize(d) if isinstance(d, str) else list(d) for d in docs]
        self.n = len(self.docs)
        self.lengths = np.array([len(d) for d in self.docs], dtype=np.float64)
        self.avgdl = float(self.lengths.mean()) if self.n and self.lengths.sum() > 0 else 1.0
        self._tf: list[Counter[str]] = [Counter(d) for d in self.docs]
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        self.idf: dict[str, float] = {t: math.log(1.0 + (self.n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        # Per-term posting lists: (doc indices, term frequencies), so a query touches only documents containing it.
        post: dict[str, tuple[list[int], list[int]]] = {}
        for i, tf in enumerate(self._tf):
            for t, c in tf.items():
                ids, cs = post.setdefault(t, ([], []))
                ids.append(i)
                cs.append(c)
        self._post = {t: (np.array(ids), np.array(cs, dtype=np.float64)) for t, (ids, cs) in post.items()}
        self._norm = self.k1 * (1.0 - self.b + self.b * self.lengths / self.avgdl)

    def scores(self, query: str | Sequence[str]) -> np.ndarray:
        """BM25 score of every document for ``query`` (shape ``(n,)``; 0 where no query term occurs)."""
        terms = tokenize(query) if isinstance(query, str) else list(query)
        out = np.zeros(self.n)
        for t in terms:  # a repeated query term counts again, as in the Okapi sum over query terms
            if t not in self._post:
                continue
            ids, tf = self._post[t]
            out[ids] += self.idf[t] * tf * (self.k1 + 1.0) / (tf + self._norm[ids])
        return out

    def top(self, query: str | Sequence[str], k: int = 1) -> list[tuple[int, float]]:
        """The ``k`` best documents as ``(index, score)``, highest score first, lower index first among ties."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        s = self.scores(query)
        order = np.lexsort((np.arange(self.n), -s))[:k]
        return [(int(i), float(s[i])) for i in order]
