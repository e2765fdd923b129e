"""RouteTasks: sizes, the by-template split, determinism, verifiers and hand-checkable facts."""

from __future__ import annotations

import collections

import pytest

from agentmill.envs.route_tasks import (CATEGORIES, RouteQuery, RouteTasks, facts, number_words, reviews,
                                        template_split, verify, yes_no_questions)


@pytest.fixture(scope="module")
def tasks() -> RouteTasks:
    return RouteTasks()


def test_sizes_and_split_by_template(tasks) -> None:
    assert len(tasks) == 1200
    assert collections.Counter(q.split for q in tasks.queries) == {"train": 720, "val": 240, "test": 240}
    per_template = collections.defaultdict(set)
    for q in tasks.queries:
        per_template[q.template_id].add(q.split)
    assert len(per_template) == 60 and all(len(s) == 1 for s in per_template.values())
    for c in CATEGORIES:
        assert {q.split for q in tasks.queries if q.category == c} == {"train", "val", "test"}
    assert len(tasks.split("test")) >= 240


def test_deterministic_and_seeded(tasks) -> None:
    again = RouteTasks()
    assert [(q.qid, q.text, q.answer) for q in again.queries] == [(q.qid, q.text, q.answer) for q in tasks.queries]
    assert template_split(1) != template_split(0)
    small = RouteTasks(per_template=2)
    assert len(small) == 120 and all(small.by_id[q.qid].text == tasks.by_id[q.qid].text for q in small.queries)
    with pytest.raises(ValueError, match="per_template"):
        RouteTasks(per_template=21)


def test_number_words() -> None:
    assert number_words(37) == "thirty-seven" and number_words(105) == "one hundred five"
    assert number_words(0) == "zero" and number_words(990) == "nine hundred ninety"
    with pytest.raises(ValueError):
        number_words(1000)


def _q(kind: str, answer: str, aliases: tuple[str, ...] = ()) -> RouteQuery:
    return RouteQuery("x-t0-00", "x", 0, "?", answer, kind, "test", aliases)


def test_verifiers() -> None:
    assert verify(_q("number", "95"), "95") == 1.0 and verify(_q("number", "95"), "The answer is 95.") == 1.0
    assert verify(_q("number", "95"), "96") == 0.0 and verify(_q("number", "95"), None) == 0.0
    assert verify(_q("number", "1234"), "1,234") == 1.0
    assert verify(_q("units", "12.345678"), "12.35") == 1.0 and verify(_q("units", "12.345678"), "12.34") == 0.0
    assert verify(_q("label", "positive"), "Positive. Because") == 1.0 and verify(_q("label", "no"), "yes") == 0.0
    assert verify(_q("text", "Kyiv", ("Kiev",)), " kiev. ") == 1.0 and verify(_q("text", "Paris"), "Lyon") == 0.0


def test_fact_table_spot_checks() -> None:
    rows = {(f["kind"], f["subject"]): f["answer"] for f in facts()}
    assert len(rows) == len(facts()) >= 450
    assert rows[("capital", "France")] == "Paris" and rows[("capital", "Japan")] == "Tokyo"
    assert rows[("symbol", "Iron")] == "Fe" and rows[("atomic_number", "Iron")] == "26"
    assert rows[("symbol", "Gold")] == "Au" and rows[("atomic_number", "Uranium")] == "92"
    assert rows[("currency", "Japan")] == "JPY" and rows[("currency", "Switzerland")] == "CHF"
    assert rows[("event_year", "the Apollo 11 Moon landing")] == "1969"
    assert rows[("event_year", "the fall of the Berlin Wall")] == "1989"
    assert sum(1 for f in facts() if f["kind"] == "atomic_number") == 92


def test_label_data_balanced() -> None:
    assert collections.Counter(r["answer"] for r in yes_no_questions()) == {"yes": 60, "no": 60}
    assert collections.Counter(r["label"] for r in reviews()) == {"positive": 60, "negative": 60}


def test_reference_answers_are_right_on_hand_checked_queries(tasks) -> None:
    by_text = {q.text: q.answer for q in tasks.queries}
    decoy = next(q for q in tasks.queries if q.category == "arith_decoy" and q.template == 0)
    inner = decoy.text.split("'")[1]
    assert decoy.answer == str(len(inner))
    words = next(q for q in tasks.queries if q.category == "arith_words" and q.template == 0)
    assert words.text.startswith("What is ") and " plus " in words.text
    assert all(q.answer for q in tasks.queries) and len(by_text) >= 1190
