"""Outcome tables: record, resume after a torn write, fingerprint guard, bad rows, long-format import."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentmill.envs.route_tasks import RouteTasks
from agentmill.methods.router.table import FingerprintMismatch, OutcomeTable, TableError, record_outcomes
from agentmill.methods.router.workers import make_worker


@pytest.fixture(scope="module")
def tasks() -> RouteTasks:
    return RouteTasks(per_template=1)


def test_record_replay_and_resume(tasks, tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    ids = [q.qid for q in tasks.queries[:8]]
    t1 = record_outcomes(tasks, [make_worker("solver:arith"), make_worker("solver:string")], path, query_ids=ids)
    assert len(t1) == 16 and json.loads(path.read_text().splitlines()[0])["type"] == "header"
    t2 = OutcomeTable.load(path)
    Y1, C1, _ = t1.matrices(ids, ["solver:arith", "solver:string"])
    Y2, C2, _ = t2.matrices(ids, ["solver:arith", "solver:string"])
    assert np.array_equal(Y1, Y2) and np.allclose(C1, C2, atol=1e-6)
    assert Y1[0, 0] == 1.0  # arith_clean-t0-00 is "What is a + b?"
    # torn last line (killed mid-write): ignored on load, the missing key re-run
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    calls = []
    w = make_worker("solver:string")
    orig = w.answer
    w.answer = lambda q, context=(): (calls.append(q), orig(q))[1]
    t3 = record_outcomes(tasks, [w], path, query_ids=ids)
    assert len(calls) == 1 and t3.complete(ids, "solver:string")


def test_fingerprint_mismatch_raises(tasks, tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    ids = [tasks.queries[0].qid]
    w = make_worker("solver:arith")
    record_outcomes(tasks, [w], path, query_ids=ids)
    w.fingerprint = "src:other"
    with pytest.raises(FingerprintMismatch, match="stale"):
        record_outcomes(tasks, [w], path, query_ids=ids)
    with pytest.raises(FileExistsError):
        record_outcomes(tasks, [make_worker("solver:arith")], path, query_ids=ids, resume=False)


@pytest.mark.parametrize("row,match", [
    ({"query_id": "q", "worker": "w", "score": 1.5, "cost": 0}, "outside"),
    ({"query_id": "q", "worker": "w", "score": 1, "cost": float("nan")}, "non-negative"),
    ({"query_id": "q", "worker": "w", "score": 1, "cost": -1}, "non-negative"),
    ({"query_id": "q", "worker": "w", "cost": 1}, "needs"),
])
def test_bad_rows(row, match) -> None:
    with pytest.raises(TableError, match=match):
        OutcomeTable.from_long([row])


def test_duplicate_key_with_different_result() -> None:
    a = {"query_id": "q", "worker": "w", "score": 1, "cost": 0, "key": "k", "answer": "1"}
    OutcomeTable.from_long([a, dict(a)])  # identical duplicates are fine
    with pytest.raises(TableError, match="duplicate key"):
        OutcomeTable.from_long([a, {**a, "score": 0, "answer": "2"}])


def test_from_long_means_replicates_and_missing_cell() -> None:
    t = OutcomeTable.from_long([{"query_id": "q", "worker": "w", "score": 1, "cost": 2, "replicate": 0},
                                {"query_id": "q", "worker": "w", "score": 0, "cost": 4, "replicate": 1}])
    Y, C, L = t.matrices(["q"], ["w"])
    assert Y[0, 0] == 0.5 and C[0, 0] == 3 and L[0, 0] == 3
    with pytest.raises(KeyError, match="router record"):
        t.matrices(["q"], ["v"])
