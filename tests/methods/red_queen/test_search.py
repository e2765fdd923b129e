"""The search on ReviewWorld: erasure, resume, anchor hygiene, bookkeeping modes, clear errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from agentmill.methods.red_queen import RedQueenConfig, SealedAnchor, build_review_search
from agentmill.methods.red_queen.ledger import RoleSpec, UtilityLedger, UtilityRecord


@pytest.mark.slow
def test_run_erases_and_keeps_independent_records() -> None:
    search, world, _ = build_review_search("review", RedQueenConfig(budget=64, seed=0))
    res = search.run()
    assert res.n_evals == 64 and res.replacements, "the biased incumbent should be replaced in this world"
    assert all(r["at_eval"] in search.checkpoints for r in res.replacements)
    assert res.n_invalid == sum(r["invalidated"] for r in res.replacements) > 0
    led = search.ledger
    assert all(r.valid for r in led.records if not r.dep)
    assert not led.stale_valid({0: search.judges[0].judge_id})
    assert res.audit_labels_used > 0 and res.anchor_tests_run == 4 * len(search.checkpoints[:4])


def test_erasure_off_keeps_stale_records() -> None:
    search, _, _ = build_review_search("review", RedQueenConfig(budget=64, seed=0, erasure="off"))
    res = search.run()
    assert res.replacements and res.n_invalid == 0
    assert search.ledger.stale_valid({0: search.judges[0].judge_id})


@pytest.mark.slow
def test_incremental_counts_equal_rescan() -> None:
    a, _, _ = build_review_search("review", RedQueenConfig(budget=48, seed=3))
    b, _, _ = build_review_search("review", RedQueenConfig(budget=48, seed=3), bookkeeping="rescan")
    ra, rb = a.run(), b.run()
    assert ra.to_dict() == rb.to_dict()
    for i in range(a.ledger.n_nodes):
        assert a.ledger.node_counts(i) == b.ledger.node_counts(i)
    assert all((x == y).all() for x, y in zip(a.ledger.clade_counts(), b.ledger.clade_counts()))


@pytest.mark.slow
def test_kill_and_resume_is_bit_identical(tmp_path) -> None:
    from agentmill.core.ledger import Ledger

    cfg = RedQueenConfig(budget=40, seed=1)
    full = tmp_path / "full"
    build_review_search("review", cfg, ledger_dir=full)[0].run()
    lines = (full / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    for cut in (1, 2, len(lines) // 3, len(lines) // 2, len(lines) - 1):
        part = tmp_path / f"cut{cut}"
        shutil.copytree(full / "blobs", part / "blobs")
        (part / "ledger.jsonl").write_bytes(b"".join(lines[:cut]) + lines[cut][:7])  # a torn last line
        build_review_search("review", cfg, ledger_dir=part)[0].run()
        assert Ledger(part).head == Ledger(full).head
        assert json.loads((part / "state.json").read_text()) == json.loads((full / "state.json").read_text())


def test_resume_with_another_config_is_refused(tmp_path) -> None:
    build_review_search("review", RedQueenConfig(budget=16, seed=0), ledger_dir=tmp_path)[0].run()
    with pytest.raises(ValueError, match="differs from the ledgered one.*statistic"):
        build_review_search("review", RedQueenConfig(budget=16, seed=0, statistic="best_belief"),
                            ledger_dir=tmp_path)[0].run()


def test_anchor_is_sealed_and_unreachable_from_the_view() -> None:
    search, _, slot = build_review_search("review", RedQueenConfig(budget=16, seed=0))
    search.run()
    view = search.view(0)
    seen, stack = set(), [view]
    while stack:  # walk the view's object graph: no SealedAnchor anywhere
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        assert not isinstance(o, SealedAnchor)
        if isinstance(o, dict):
            stack += list(o.keys()) + list(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack += list(o)
        elif hasattr(o, "__dict__"):
            stack += list(vars(o).values())
    assert not any(isinstance(v, np.ndarray) for v in vars(slot.anchor).values()) if hasattr(slot.anchor,
                                                                                           "__dict__") else True
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(slot.anchor)


def test_small_anchor_and_world_check_errors() -> None:
    from agentmill.methods.red_queen import RedQueenSearch

    class One:
        slot, audit_labels_used = 0, 0
        anchor = SealedAnchor(np.arange(10), np.zeros(10))

    ws = build_review_search("review", RedQueenConfig(budget=16))[0].workspace
    with pytest.raises(ValueError, match="min_anchor_outcomes"):
        RedQueenSearch(ws, {0: One()}, RedQueenConfig(budget=16), None)


def test_ledger_never_invalidates_independent_records() -> None:
    roles = [RoleSpec("d", "evaluator_dependent", ("t",), slot=0), RoleSpec("i", "evaluator_independent", ("t",))]
    led = UtilityLedger(roles, n_slots=1)
    led.add_node(None)
    led.add_node(0)
    led.append(UtilityRecord(0, 1, 0, 0, 1, (0,), {0: "A"}, (1,), 1))
    led.append(UtilityRecord(1, 1, 1, 0, 0, (), {}, (1,), 2))
    assert led.clade_counts()[0].tolist() == [1, 1] and led.clade_counts()[1].tolist() == [1, 1]
    assert led.invalidate(0, "B", 8) == [0]
    assert led.records[1].valid and led.node_counts(1) == (0, 1) and led.clade_counts()[0].tolist() == [0, 0]


class _FixedJudge:
    def __init__(self, judge_id: str, right: np.ndarray) -> None:
        self.judge_id, self.right = judge_id, right

    def accept(self, items):
        if not isinstance(items, np.ndarray):  # a writer's document during the search: accept it
            return np.ones(len(items), dtype=bool)
        return np.where(self.right, items, 1 - items).astype(bool)

    def to_spec(self):
        return {"judge_id": self.judge_id, "right": self.right.tolist()}


class _Slot:
    """Anchor of 60 items; the incumbent is right on 40; challengers are given (a tie, worse, better)."""

    def __init__(self, challengers) -> None:
        self.slot, self.audit_labels_used = 0, 0
        labels = np.arange(60) % 2
        self.anchor = SealedAnchor(labels, labels)
        self._inc = _FixedJudge("inc", np.arange(60) < 40)
        self._ch = challengers

    def incumbent(self):
        return self._inc

    def challengers(self, view, rng):
        return [_FixedJudge(f"{j.judge_id}@{view.at_eval}", j.right) for j in self._ch]

    def judge_from_spec(self, spec):
        return _FixedJudge(spec["judge_id"], np.asarray(spec["right"]))


@pytest.mark.parametrize("statistic", ["best_belief", "mcnemar"])
def test_ties_and_worse_keep_the_incumbent_better_replaces(statistic) -> None:
    from agentmill.methods.red_queen import RedQueenSearch

    ws = build_review_search("review", RedQueenConfig(budget=8))[0].workspace
    tie = _FixedJudge("tie", np.arange(60) >= 20)  # also 40 right, on other items
    worse = _FixedJudge("worse", np.arange(60) < 39)
    better = _FixedJudge("better", np.arange(60) < 59)  # 19 more right, none fewer
    cfg = RedQueenConfig(budget=8, statistic=statistic, n_challengers=2)
    kept = RedQueenSearch(ws, {0: _Slot([tie, worse])}, cfg, None).run()
    assert kept.replacements == []
    won = RedQueenSearch(ws, {0: _Slot([tie, better])}, cfg, None).run()
    assert [r["to"] for r in won.replacements] == ["better@8"]


def test_a_world_failing_its_checks_refuses_to_run() -> None:
    from agentmill.envs.review_world import WorldConstants

    with pytest.raises(RuntimeError, match="WC-4"):
        build_review_search("review", RedQueenConfig(budget=16), constants=WorldConstants(y_threshold=0.9))
