"""ReviewWorld: the world checks pass, the judges and metrics behave as defined."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.seeding import rng_for
from agentmill.envs.review_world import (DocBatch, LogisticJudge, ReviewWorld, accuracy, false_reject_rate,
                                         human_docs, machine_docs, writer_mean_quality)


@pytest.fixture(scope="module")
def world() -> ReviewWorld:
    return ReviewWorld("review", 0)


def test_world_checks_pass(world) -> None:
    checks = world.world_checks()
    assert all(c["pass"] for c in checks.values()), checks
    assert 1.8 <= checks["WC-1"]["R_J0"] <= 2.0 and 0.9 <= checks["WC-1"]["R_Jstar"] <= 1.1


def test_writer_mean_quality_by_hand() -> None:
    assert writer_mean_quality([0.5, 0.2, 0.0]) == pytest.approx(0.2 + 0.6 * 0.5 * 0.9)
    assert writer_mean_quality([1.0, 0.0, 0.0]) == pytest.approx(0.8)
    docs = machine_docs([1.0, 0.0, 0.0], 20000, rng_for("t", 1))
    assert abs(docs.q.mean() - 0.8) < 0.01 and abs(docs.style.mean() - 0.85) < 0.02


def test_judge_and_splits(world) -> None:
    sp = world.splits
    assert len(sp.train) == 100 and len(sp.select) == 200 and len(sp.holdout) == 100
    assert not set(sp.train.hashes()) & set(sp.select.hashes())
    j = LogisticJudge("t", (1, 0, 0, 0, 0), 0.0, (0.5, 0, 0, 0, 0), (1, 1, 1, 1, 1))
    d = DocBatch(*(np.array([0.0, 1.0]) for _ in range(7)))
    assert j.accept(d).tolist() == [False, True]
    assert LogisticJudge.from_spec(j.to_spec()) == j
    assert false_reject_rate(world.j_strict, sp.select, sp.select_y) >= 0.40
    assert accuracy(world.j_star, sp.holdout, sp.holdout_y) > accuracy(world.j0, sp.holdout, sp.holdout_y)


def test_bias_ratio_is_one_for_an_origin_blind_judge(world) -> None:
    r, _ = world.bias_ratio(world.j_star)
    assert 0.9 <= r <= 1.1
    h = human_docs(5000, rng_for("t", 2))
    assert abs(h.polish.mean() - 0.35) < 0.01


def test_variants_and_bad_variant() -> None:
    w = ReviewWorld("review-lenient-anchor", 0)
    assert w.splits.select_y.mean() > w.oracle_labels(w.splits.select).mean()
    with pytest.raises(ValueError, match="variant"):
        ReviewWorld("nope", 0)
