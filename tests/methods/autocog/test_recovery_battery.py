"""The cardinal battery pool's rule-generated pairs (5,000 random pairs plus rule-generated
steep-vs-flat and level-shift pairs [R]) and the frozen battery built from it."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog import recovery as R
from agentmill.methods.autocog.simulate import expected_choice_props


def _ctx(R_: int, v=(0.9, 0.8)) -> dict:
    return {"validities": np.asarray(v), "n_features": len(v), "rating_max": R_}


def test_steep_vs_flat_by_hand() -> None:
    pairs = R.steep_vs_flat_pairs(2, 2)
    # cue orders (0,1),(1,0) × g ∈ {1,2} × m ∈ {0,1,2} × both orientations
    assert len(pairs) == 2 * 2 * 3 * 2
    assert pairs[0] == ((1, 1), (0, 2)) and pairs[1] == ((0, 2), (1, 1))  # i=0, j=1, g=1, m=0 (both cues set)
    assert R.steep_vs_flat_pairs(5, 4)[0] == ((1, 4, 0, 0), (0, 5, 0, 0))
    with pytest.raises(ValueError, match="R >= 2"):
        R.steep_vs_flat_pairs(1, 4)


def test_steep_vs_flat_ties_ew_and_tilts_dr_wadd_to_the_steep_side() -> None:
    pairs = R.steep_vs_flat_pairs(5, 2)
    A = np.array([p[0] for p in pairs], float)
    B = np.array([p[1] for p in pairs], float)
    ew = expected_choice_props(L.ew(), A, B, _ctx(5, (0.7, 0.7)), n_draws=50)
    assert np.allclose(ew, 0.5)  # the same gap on each side: equal weights tie exactly
    dr = expected_choice_props(L.dr_wadd(alpha=0.5, s=1.0), A, B, _ctx(5, (0.7, 0.7)), n_draws=200)
    # pairs at even index have the steep option as A: concave utility prefers it (equal validities)
    assert (dr[0::2] > 0.5).all() and (dr[1::2] < 0.5).all()


def test_level_shift_keeps_differences_and_moves_dr_wadd_toward_half() -> None:
    pairs = R.level_shift_pairs(5, 4, seed=0, n_bases=20)
    assert len(pairs) == 40
    base, shifted = pairs[0::2], pairs[1::2]
    for (a, b), (a2, b2) in zip(base, shifted):
        assert max(a + b) <= 2 and max(a2 + b2) == 5
        assert np.array_equal(np.subtract(a, b), np.subtract(a2, b2))
    ctx = _ctx(5, R.V)
    A0, B0 = (np.array([p[k] for p in base], float) for k in (0, 1))
    A1, B1 = (np.array([p[k] for p in shifted], float) for k in (0, 1))
    for th in (L.wadd(), L.tallying(), L.ttb()):  # difference-based rules cannot see the shift
        assert np.allclose(expected_choice_props(th, A0, B0, ctx, n_draws=100),
                           expected_choice_props(th, A1, B1, ctx, n_draws=100))
    dr = L.dr_wadd(alpha=0.5, s=1.0)
    p0, p1 = (expected_choice_props(dr, a, b, ctx, n_draws=200) for a, b in ((A0, B0), (A1, B1)))
    strict = np.abs(p0 - 0.5) > 1e-9
    assert (np.abs(p1 - 0.5)[strict] < np.abs(p0 - 0.5)[strict]).all()


def test_cardinal_pool_holds_the_rule_pairs_and_the_frozen_battery_checks() -> None:
    A, B = R._pool(5, 0)
    pool = set(zip(map(tuple, A.astype(int).tolist()), map(tuple, B.astype(int).tolist())))
    rule = set(R.steep_vs_flat_pairs(5, 4)) | set(R.level_shift_pairs(5, 4, 0))
    assert rule <= pool and len(pool) == len(A) >= R.N_RANDOM_POOL
    bat = R.load_batteries()[5]
    assert bat["check"]["passed"] and len(bat["pairs_a"]) == R.N_BATTERY
    assert bat["sha256"] == R.battery_sha(bat)
