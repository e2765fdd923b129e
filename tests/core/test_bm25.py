"""core.bm25 on corpora small enough to score by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.core.bm25 import BM25, tokenize


def test_tokenize() -> None:
    assert tokenize("Total sent to {contact} in MAY-2025!") == ["total", "sent", "to", "contact", "in", "may", "2025"]


def test_scores_match_the_formula_by_hand() -> None:
    docs = ["a b", "a c c", "d"]
    bm = BM25(docs, k1=1.5, b=0.75)
    avgdl = 2.0
    idf_c = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    tf, dl = 2, 3
    expect = idf_c * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * dl / avgdl))
    s = bm.scores("c")
    assert s[1] == pytest.approx(expect) and s[0] == 0 and s[2] == 0


def test_rarer_terms_weigh_more_and_unknown_terms_score_zero() -> None:
    bm = BM25(["capital of france paris", "capital of italy rome", "capital of spain madrid"])
    assert bm.top("capital italy")[0][0] == 1
    assert bm.scores("capital")[0] < bm.scores("italy")[1]
    assert not bm.scores("zzz").any()


def test_top_is_deterministic_on_ties_and_checks_k() -> None:
    bm = BM25(["x y", "x y", "z"])
    assert [i for i, _ in bm.top("x", 3)] == [0, 1, 2]
    with pytest.raises(ValueError):
        bm.top("x", 0)
    with pytest.raises(ValueError):
        BM25(["a"], b=2)


def test_empty_corpus_and_token_lists() -> None:
    assert BM25([]).scores("a").shape == (0,)
    bm = BM25([["a", "b"], ["b"]])
    assert np.argmax(bm.scores(["a"])) == 0
