"""The cliff test's exact table, its worked pair, and its exact null false-positive rate against simulation."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.cliff_tokens.ztest import (CliffTest, cliff_matrix, detect, expected_false_cliffs, is_cliff,
                                                  min_detectable, null_fp_rate, power, z_and_p)


def test_table_has_1283_cells_and_the_same_at_the_exact_quantile() -> None:
    m = cliff_matrix(64)
    assert m.sum() == 1283
    assert (cliff_matrix(64, CliffTest(z=1.6448536269514722)) == m).all()


def test_worked_pair_and_hand_computation() -> None:
    # (32, 16): drop 0.25 > 0.1 + 1.645 * sqrt(2 * .5*.5/64 ... ) computed by hand: SE = 0.08268
    se = np.sqrt(0.5 * 0.5 / 64 + 0.25 * 0.75 / 64)
    assert abs(se - 0.08268) < 1e-5 and 0.25 > 0.1 + 1.645 * se
    assert is_cliff(32, 64, 16, 64) and not is_cliff(32, 64, 17, 64)
    assert not is_cliff(0, 64, 0, 64)  # k_prev = 0 never
    md = {k: (d, v) for k, d, v in min_detectable(64)}
    assert min(md) == 12 and md[12] == (0.1875, 0.0) and md[64] == (0.1875, 0.8125)
    assert abs(md[32][0] - 0.25) < 1e-12 and abs(md[32][1] - 0.25) < 1e-12


def test_variants_that_change_the_table_do() -> None:
    m = cliff_matrix(64).sum()
    assert cliff_matrix(64, CliffTest(z=1.96)).sum() < m
    assert cliff_matrix(64, CliffTest(delta0=0.0)).sum() > m


def test_null_fp_exact_matches_simulation() -> None:
    rng = np.random.default_rng(0)
    for v in (0.3, 0.5):
        draws = 100_000
        rate = np.mean(is_cliff(rng.binomial(64, v, draws), 64, rng.binomial(64, v, draws), 64))
        exact = null_fp_rate(v, 64)
        assert abs(rate - exact) <= 3 * np.sqrt(exact * (1 - exact) / draws)
    assert abs(null_fp_rate(0.5, 64) - 0.00296) < 1e-5
    assert abs(power(0.5, 0.2, 64) - 0.795) < 5e-4


def test_detect_compares_consecutive_scored_positions_and_pvalues() -> None:
    k = np.array([40, 40, -1, 10, 10])
    n = np.array([64, 64, -1, 64, 64])
    cl = detect(k, n, [65, 66, 67, 68])
    assert [c.pos for c in cl] == [3] and cl[0].token_id == 67 and cl[0].k_prev == 40
    zs, p = z_and_p(40, 64, 10, 64)
    assert zs > 1.645 and p < 0.05
    assert z_and_p(64, 64, 0, 64)[1] == 0.0  # SE = 0 and drop > delta0
    assert expected_false_cliffs(k, n) > 0
    holm = detect(k, n, [65, 66, 67, 68], CliffTest(correction="holm"))
    assert [c.pos for c in holm] == [3]


@pytest.mark.parametrize("kw", [{"delta0": 1.0}, {"delta0": -0.1}, {"z": 0.0}, {"correction": "x"}])
def test_bad_constants_raise(kw) -> None:
    with pytest.raises(ValueError):
        CliffTest(**kw)


def test_bad_counts_raise() -> None:
    with pytest.raises(ValueError):
        is_cliff(65, 64, 0, 64)
    with pytest.raises(ValueError):
        is_cliff(1, 1, 0, 1)
