"""The budget curve's pieces on hand-made tables: the median's order-statistic interval (hand-checked and by its
coverage over many draws), the strict and noise-aware near-optimal sets, first hits, shares, the smallest budget,
the returned best against the optimum, and the prefix property the budget curve rests on."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from agentmill.methods.kernelpro import budget as kb
from agentmill.methods.kernelpro import library, search, tables
from agentmill.methods.kernelpro.config import SearchConfig


def _table(speeds: dict[int, float], samples: dict[int, tuple[list[float], list[float]]] | None = None,
           failed: tuple[int, ...] = ()) -> tables.MeasuredTable:
    """sum's 4-point smoke space; point i (in enumeration order) has speed speeds[i]."""
    rows = {}
    for i, p in enumerate(library.enumerate_space("sum", "smoke")):
        cand, ref = (samples or {}).get(i, ([1.0, 1.0, 1.0], [speeds[i]] * 3))
        rows[tables.key(p)] = {"params": dict(p), "status": "incorrect" if i in failed else "correct",
                               "speedup": speeds[i], "kb_allclose": True, "recommended": [], "cand_samples": cand,
                               "ref_samples": ref}
    return tables.MeasuredTable("sum", "smoke", rows, {"s_cap": 2.0})


def test_median_interval_by_hand() -> None:
    # n = 5: no inner pair reaches 95 %; the range covers with 1 - 2/32 = 0.9375
    med, lo, hi, cov = kb.median_interval([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (med, lo, hi) == (3.0, 1.0, 5.0) and cov == pytest.approx(0.9375)
    # n = 10: j = 2 covers 1 - 2·11/1024 = 0.9785; j = 3 only 1 - 2·56/1024 = 0.8906, so [x_(2), x_(9)]
    med, lo, hi, cov = kb.median_interval([float(v) for v in range(10, 0, -1)])
    assert (med, lo, hi) == (5.5, 2.0, 9.0) and cov == pytest.approx(1 - 22 / 1024)
    assert all(math.isnan(v) for v in kb.median_interval([]))


def test_median_interval_covers_the_median_at_its_stated_rate() -> None:
    # exponential(1): median ln 2. n = 15 gives j = 4, coverage 1 - 2·576/32768 = 0.9648; over 3000 draws the
    # observed rate must sit within 4 binomial standard errors (≈ 0.013) of it
    rng = np.random.default_rng(0)
    hits, cov = 0, None
    for _ in range(3000):
        _, lo, hi, cov = kb.median_interval(rng.exponential(size=15))
        hits += lo <= math.log(2) <= hi
    se = math.sqrt(cov * (1 - cov) / 3000)
    assert cov == pytest.approx(1 - 2 * 576 / 32768) and abs(hits / 3000 - cov) < 4 * se


def test_paired_speeds_are_reference_over_candidate_per_repeat() -> None:
    assert kb.paired_speeds({"cand_samples": [1.0, 2.0, 0.0], "ref_samples": [3.0, 3.0, 1.0]}) == [3.0, 1.5]
    assert kb.paired_speeds({}) == []


def test_near_optimal_sets_strict_and_under_noise() -> None:
    # speeds 1.0, 2.0, 1.92, 1.5: strict (≥ 0.95 × 2 = 1.9) = {1, 2}. Noise: the optimum's paired speeds
    # [1.6, 2.0, 2.4] (range: lo 1.6, target 0.95 × 1.6 = 1.52); point 3's [1.2, 1.5, 1.6] reaches it (hi 1.6),
    # point 0's [0.9, 1.0, 1.1] does not
    sm = {0: ([1.0] * 3, [0.9, 1.0, 1.1]), 1: ([1.0] * 3, [1.6, 2.0, 2.4]), 2: ([1.0] * 3, [1.92] * 3),
          3: ([1.0] * 3, [1.2, 1.5, 1.6])}
    tb = _table({0: 1.0, 1: 2.0, 2: 1.92, 3: 1.5}, sm)
    keys = list(tb.rows)
    assert kb.near_optimal(tb) == {keys[1], keys[2]}
    assert kb.near_optimal(tb, noise=True) == {keys[1], keys[2], keys[3]}
    assert kb.has_samples(tb)
    bare = _table({0: 1.0, 1: 2.0, 2: 1.0, 3: 1.0}, {0: ([], [])})
    assert not kb.has_samples(bare)
    with pytest.raises(ValueError, match="no timing samples"):
        kb.near_optimal(bare, noise=True)


def test_first_hits_shares_and_the_smallest_budget() -> None:
    ev = [{"params": {"a": 1}}, {"params": {"a": 2}}, {"params": {"a": 3}}]
    target = {tables.key({"a": 2})}
    assert kb.first_hit(ev, target, 40) == 2 and kb.first_hit(ev, {tables.key({"a": 9})}, 40) == 41
    assert kb.share_reached([2, 5, 41, 10], 5) == (2, 4) and kb.share_reached([2, 5, 41, 10], 40) == (3, 4)
    shares = {"t1": {"10": 0.5, "20": 0.95, "space": 1.0}, "t2": {"10": 1.0, "20": 0.85, "space": 1.0}}
    assert kb.smallest_budget(shares, ["10", "20", "space"]) == "space"
    assert kb.smallest_budget(shares, ["10", "20", "space"], level=0.85) == "20"
    assert kb.smallest_budget({"t": {"10": 0.2}}, ["10"]) is None


def test_compare_to_optimum() -> None:
    tb = _table({0: 1.0, 1: 2.0, 2: 1.92, 3: 5.0}, failed=(3,))  # the failed point's speed never counts
    pts = library.enumerate_space("sum", "smoke")
    near = kb.compare_to_optimum(tb, pts[2])
    assert near["within"] is True and near["optimum_speedup"] == 2.0 and near["fraction_of_optimum"] == 0.96
    far = kb.compare_to_optimum(tb, pts[0])
    assert far["within"] is False and far["fraction_of_optimum"] == 0.5
    assert kb.compare_to_optimum(tb, pts[3])["within"] is False
    assert kb.compare_to_optimum(tb, {"opt": "O0", "fm": 0, "acc": 1})["within"] is None


@pytest.mark.parametrize("algo", ["mcts", "greedy", "random"])
def test_a_smaller_budget_is_a_prefix_of_a_larger_one(algo: str) -> None:
    # the budget curve replays once at the largest budget: that is only valid when the budget is read by the
    # stopping test alone. A rugged synthetic table over sum's 48-point quick space, with failures
    root = library.root("sum", "quick")

    def ev(p: library.Params) -> search.Outcome:
        h = zlib.crc32(tables.key(p).encode()) % 97
        return search.Outcome(p == root or h % 11 != 0, 0.5 + h / 40, (("acc", 8),) if h % 3 == 0 else ())

    def run(budget: int) -> search.SearchResult:
        rng = np.random.default_rng([3, len(algo)])
        return search.run_algo(algo, "sum", ev, SearchConfig(budget=budget, seed=3), which="quick", s_cap=2.5, rng=rng)

    short, long = run(12), run(40)
    assert [e["params"] for e in long.evaluated[:12]] == [e["params"] for e in short.evaluated]
    np.testing.assert_array_equal(np.array(long.curve[:12]), np.array(short.curve))
    assert len(long.evaluated) > 12
