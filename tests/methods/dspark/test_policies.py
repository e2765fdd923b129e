"""Verify-length policies and the scheduler on hand-checkable cases (paper Algorithm 1 [A]), and the SPS table."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from agentmill.methods.dspark.costmodel import SPSTable, engine_step_fn
from agentmill.methods.dspark.policies import make_policy, schedule


def app_a_table() -> SPSTable:
    # SPS(1) = 1.0, SPS(2) = 0.5, SPS(3) = 0.45 (paper App. A)
    return SPSTable([1, 2, 3], [1], [512], {"r=1,ctx=512": [1.0, 2.0, 1 / 0.45]})


def test_app_a_retrospective_verifies_two_after_a_and_early_stop_none():
    sps = app_a_table()
    # x1 = A: c = (0.8, 0.9): Θ0 = 1, Θ1 = 1.8·0.5 = 0.9, Θ2 = 2.52·0.45 = 1.134
    assert schedule(np.array([[0.8, 0.9]]), [2], sps, "retrospective").tolist() == [2]
    assert schedule(np.array([[0.8, 0.0]]), [2], sps, "retrospective").tolist() == [0]
    # early stop breaks at Θ1 = 0.9 < Θ0 whatever c2 is (c2 is never read)
    assert schedule(np.array([[0.8, 0.9]]), [2], sps, "dspark").tolist() == [0]
    assert schedule(np.array([[0.8, 0.0]]), [2], sps, "dspark").tolist() == [0]


def linear_table(slope: float = 0.15, max_b: int = 64) -> SPSTable:
    B = list(range(1, max_b + 1))
    return SPSTable(B, [1], [512], {"r=1,ctx=512": [1 + slope * (b - 1) for b in B]})


def test_greedy_walk_by_hand():
    sps = linear_table(0.5)
    # one request, c = (0.9, 0.9, 0.1): Θ0 = 1; Θ1 = 1.9/1.5 = 1.267; Θ2 = 2.71/2 = 1.355; Θ3 = 2.781/2.5 < Θ2
    assert schedule(np.array([[0.9, 0.9, 0.1]]), [3], sps, "dspark").tolist() == [2]
    # avail caps
    assert schedule(np.array([[0.9, 0.9, 0.1]]), [1], sps, "dspark").tolist() == [1]


@pytest.mark.filterwarnings("ignore:SPS table is flat")
def test_lengths_are_prefixes_and_ties_go_to_earlier_position_then_lower_id():
    sps = linear_table(0.0001)
    rng = np.random.default_rng(0)
    for _ in range(200):
        conf = rng.choice([0.5, 1.0], size=(3, 4))
        stale = np.cumprod(rng.random((3, 4)), 1)
        for pol in ("dspark", "dspark-async"):
            ell = schedule(conf, [4, 4, 4], sps, pol, req_ids=np.array([7, 3, 5]), stale_survival=stale)
            assert ((ell >= 0) & (ell <= 4)).all()
    # exact tie between request ids 3 and 7 at the same position: with capacity for one token, id 3 wins
    tie = schedule(np.array([[0.5], [0.5]]), [1, 1], linear_table(0.0001), "dspark-async",
                   req_ids=np.array([7, 3]), stale_survival=np.array([[0.5], [0.0]]))
    assert tie.tolist() == [0, 1]


def test_async_capacity_comes_from_stale_survivals_only():
    sps = linear_table(0.5)
    fresh = np.array([[0.99, 0.99, 0.99]])
    low = schedule(fresh, [3], sps, "dspark-async", stale_survival=np.array([[0.1, 0.01, 0.001]]))
    high = schedule(fresh, [3], sps, "dspark-async", stale_survival=np.array([[0.9, 0.81, 0.73]]))
    assert low.tolist() == [0] and high.tolist() == [3]


def test_s_zero_refused_and_adaptive_needs_a_table():
    with pytest.raises(ValueError, match="s >= 1"):
        make_policy("dspark-async:0", linear_table())
    with pytest.raises(ValueError, match="SPS"):
        make_policy("dspark")
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("fastest")


def test_simple_policies():
    conf = np.array([[0.9, 0.4, 0.9], [0.2, 0.9, 0.9]])
    assert make_policy("fixed:2").lengths(conf, np.array([3, 1]), np.array([0, 1]), 0).tolist() == [2, 1]
    assert make_policy("threshold:0.5").lengths(conf, np.array([3, 3]), np.array([0, 1]), 0).tolist() == [1, 0]
    assert make_policy("off").lengths(conf, np.array([3, 3]), np.array([0, 1]), 0).tolist() == [0, 0]


def test_async_uses_observed_history_per_request():
    pol = make_policy("dspark-async:1", linear_table(0.5))
    pol.observe(np.array([4]), np.array([[0.95, 0.9, 0.85]]))
    got = pol.lengths(np.array([[0.99, 0.99, 0.99]]), np.array([3]), np.array([4]), 0)
    assert got.tolist() == [3]


def test_sps_table_interpolates_refuses_extrapolation_and_round_trips(tmp_path):
    t = SPSTable([1, 3], [1, 4], [128], {"r=1,ctx=128": [1.0, 2.0], "r=4,ctx=128": [2.0, 4.0]})
    assert t.step_time(2, 1, 100) == pytest.approx(1.5)
    assert t.sps(2, 3, 500) == pytest.approx(1 / 3.0)          # nearest R bucket 4
    with pytest.raises(ValueError, match="beyond"):
        t.sps(4)
    back = SPSTable.load(t.save(tmp_path / "s.json"))
    assert back.step_seconds == t.step_seconds
    assert json.loads((tmp_path / "s.json").read_text())["schema"] == "agentmill.sps/1"
    with pytest.warns(UserWarning, match="flat"):
        SPSTable([1, 2], [1], [512], {"r=1,ctx=512": [1.0, 1.01]})


def test_profile_on_the_tiny_engine():
    from agentmill.lm.engine import EngineConfig
    from agentmill.lm.engine.tiny import tiny_llama

    eng = tiny_llama(0, EngineConfig(threads=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = SPSTable.profile(engine_step_fn(eng), {"B": [1, 8, 64], "R": [1, 4], "ctx": [32]}, reps=2, warmup=1)
    assert t.max_B == 64 and all(v > 0 for row in t.step_seconds.values() for v in row)


def test_a_step_already_past_the_table_verifies_nothing_extra():
    sps = linear_table(0.5, max_b=16)
    assert schedule(np.array([[0.99, 0.99]]), [2], sps, "dspark", extra_tokens=40).tolist() == [0]
    assert schedule(np.array([[0.99, 0.99]]), [2], sps, "dspark-async", extra_tokens=40,
                    stale_survival=np.array([[0.9, 0.8]])).tolist() == [0]


def test_isotonic_fit_pools_violators_and_keeps_monotone_rows():
    from agentmill.methods.dspark.costmodel import isotonic_increasing

    assert isotonic_increasing([3.0, 1.0, 2.0, 5.0]) == [2.0, 2.0, 2.0, 5.0]
    assert isotonic_increasing([1.0, 2.0, 2.0, 4.0]) == [1.0, 2.0, 2.0, 4.0]
    assert isotonic_increasing([5.0]) == [5.0]
    y = isotonic_increasing([1.0, 3.0, 2.0, 2.0, 6.0, 5.0])
    assert y == sorted(y) and abs(sum(y) - 19.0) < 1e-12   # PAV keeps the total


def test_profile_interleaves_b_and_survives_a_contention_burst():
    """A burst that slows a run of consecutive calls must not make a larger B look cheaper than a smaller one."""
    calls = []

    def step(b: int, r: int, ctx: int) -> float:
        calls.append(b)
        burst = 4.0 if 6 <= len(calls) < 10 else 1.0      # four consecutive slow calls
        return 0.01 * (1 + 0.1 * (b - 1)) * burst

    t = SPSTable.profile(step, {"B": [1, 2, 4, 8], "R": [1], "ctx": [64]}, reps=3, warmup=1)
    assert calls[:8] == [1, 2, 4, 8] * 2                    # warm-up sweep, then interleaved repetitions
    row = t.step_seconds["r=1,ctx=64"]
    assert row == sorted(row)
    assert t.raw_step_seconds is not None and len(t.raw_step_seconds["r=1,ctx=64"]) == 4
    clean = [0.01 * (1 + 0.1 * (b - 1)) for b in (1, 2, 4, 8)]
    assert max(abs(a - b) / b for a, b in zip(row, clean)) < 1e-9   # the median of 3 discards one slow sweep


def test_sps_table_lookup_matches_numpy_interp_at_every_bucket_and_between_points():
    """The scheduler's fast lookup (bucket cached per (R, ctx), pure-Python interpolation) gives np.interp's values."""
    rng = np.random.default_rng(0)
    B = [1, 2, 4, 8, 16]
    rows = {SPSTable.key(r, c): sorted(rng.uniform(0.01, 0.2, len(B))) for r in (1, 4) for c in (128, 512)}
    t = SPSTable(B, [1, 4], [128, 512], rows)
    for b in range(1, 17):
        for R, ctx, key in ((1, 100, "r=1,ctx=128"), (3, 400, "r=4,ctx=512"), (2, 320, "r=1,ctx=128"),
                            (9, 9000, "r=4,ctx=512")):
            assert t.step_time(b, R, ctx) == pytest.approx(float(np.interp(b, B, rows[key])), rel=1e-12, abs=0)
