"""The memoised and pruned hot paths of ConstraintRot equal their plain definitions.

Why: the E164 experiments were sped up by caching pure computations (prereg, catalogue, tokens, counts) and by
pruning work whose outcome is already decided (edit distances, Jaccard pairs past the budget cut); every claim
rests on these being exact, so each shortcut is checked against the computation it skips.
"""

from __future__ import annotations

import random

import numpy as np

from agentmill.methods.constraint_rot.catalogue import load_catalogue
from agentmill.methods.constraint_rot.compactors.extractive import (
    SCORERS,
    ExtractiveSummary,
    jaccard,
    tfidf_rows,
)
from agentmill.methods.constraint_rot.messages import (
    WhitespaceCounter,
    is_rule_like,
    normalise,
    word_tokens,
)
from agentmill.methods.constraint_rot.prereg import (
    default_prereg_path,
    load_prereg,
    parse_prereg,
)
from agentmill.methods.constraint_rot.survival import (
    PRESERVED_SIMILARITY,
    _may_reach,
    token_similarity,
)


def _select_reference(m: ExtractiveSummary, sents: list[tuple[int, str]], score: np.ndarray,
                      budget: float) -> list[int]:
    """ExtractiveSummary.select as first written: full pairwise dedupe, then the budget cut."""
    forced = [m.scorer == "constraint_aware" and is_rule_like(s) for _, s in sents]
    ranking = sorted(range(len(sents)), key=lambda k: (not forced[k], -round(float(score[k]), 12), -k))
    token_sets = [set(word_tokens(normalise(s))) for _, s in sents]
    ranked: list[int] = []
    for k in ranking:
        if any(jaccard(token_sets[k], token_sets[j]) >= m.dedupe for j in ranked):
            continue
        ranked.append(k)
    chosen, used = [], 0.0
    for k in ranked:
        cost = m.counter.count(sents[k][1])
        if not forced[k] and chosen and used + cost > budget:
            break
        chosen.append(k)
        used += cost
    return sorted(chosen)


def _tfidf_reference(docs: list[list[str]]) -> np.ndarray:
    vocab: dict[str, int] = {}
    for d in docs:
        for w in d:
            vocab.setdefault(w, len(vocab))
    m = np.zeros((len(docs), max(len(vocab), 1)))
    for r, d in enumerate(docs):
        if d:
            np.add.at(m[r], [vocab[w] for w in d], 1.0)
    df = (m > 0).sum(axis=0)
    m *= np.log((1 + len(docs)) / (1 + df)) + 1.0
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)


def test_select_equals_full_dedupe_then_cut() -> None:
    rnd = random.Random(1)
    vocab = [f"w{i}" for i in range(20)] + ["never", "must", "not", "only"]
    for _ in range(300):
        sents = [(rnd.randint(0, 6), " ".join(rnd.choice(vocab[:rnd.randint(2, len(vocab))])
                                              for _ in range(rnd.randint(0, 10))) + ".")
                 for _ in range(rnd.randint(0, 30))]
        score = np.round(np.array([rnd.random() for _ in sents]), rnd.choice([1, 12]))
        for scorer in SCORERS:
            m = ExtractiveSummary(0.25, scorer, dedupe=rnd.choice([0.3, 0.9, 1.0]), counter=WhitespaceCounter())
            m.scores = lambda messages, s, score=score: score  # type: ignore[method-assign]
            budget = rnd.choice([0, 5, 30, 1000])
            assert m.select([], sents, budget=budget) == _select_reference(m, sents, score, budget)


def test_tfidf_rows_equal_the_per_row_counts() -> None:
    rnd = random.Random(2)
    for _ in range(200):
        docs = [[f"w{rnd.randint(0, 15)}" for _ in range(rnd.randint(0, 12))] for _ in range(rnd.randint(0, 9))]
        got, want = tfidf_rows(docs), _tfidf_reference(docs)
        assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_length_bound_never_skips_a_preserved_match() -> None:
    rnd = random.Random(3)
    for _ in range(2000):
        a = [rnd.choice("abcd") for _ in range(rnd.randint(0, 25))]
        b = [rnd.choice("abcd") for _ in range(rnd.randint(0, 25))]
        if token_similarity(a, b) >= PRESERVED_SIMILARITY:
            assert _may_reach(len(a), len(b))


def test_word_tokens_returns_a_fresh_list() -> None:
    first = word_tokens("send it to acme.com.")
    first.append("x")
    assert word_tokens("send it to acme.com.") == ["send", "it", "to", "acme.com"]


def test_cached_prereg_and_catalogue_are_the_parsed_ones() -> None:
    raw = default_prereg_path().read_bytes()
    fresh = parse_prereg(raw, path=str(default_prereg_path()))
    a, b = load_prereg(), load_prereg()
    assert a == fresh and b == fresh
    a.statistics["mutated"] = True  # a caller's copy: the next load is unaffected
    assert "mutated" not in load_prereg().statistics
    assert load_catalogue() is load_catalogue()


def test_catalogue_cache_reloads_an_edited_directory(tmp_path) -> None:
    import shutil

    from agentmill.methods.constraint_rot.catalogue import DEFAULT_PATH

    root = tmp_path / "cat"
    shutil.copytree(DEFAULT_PATH, root)
    first = load_catalogue(root)
    assert load_catalogue(root) is first
    f = next(root.glob("soft/*.yaml"))
    f.write_text(f.read_text() + "\n# edited\n")
    second = load_catalogue(root)
    assert second is not first and second.sha256 != first.sha256
