"""The two-proportion, trend and power statistics added for model forensics: hand-checked values and coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.core.stats import (cochran_armitage, fisher_exact, mde_two_prop, newcombe_diff, power_two_prop,
                                  rate_ratio_ci)


def test_newcombe_matches_the_published_example() -> None:
    # Newcombe (1998), method 10 on 56/70 vs 48/80: difference 0.2, interval 0.0524 to 0.3339
    e = newcombe_diff(56, 70, 48, 80)
    assert e.value == pytest.approx(0.2)
    assert (round(e.lo, 4), round(e.hi, 4)) == (0.0524, 0.3339)
    assert e.n == 150 and e.method == "newcombe"


def test_newcombe_stays_in_range_at_the_edges() -> None:
    e = newcombe_diff(10, 10, 0, 10)
    assert e.value == 1.0 and -1 <= e.lo < 1.0 and e.hi == 1.0
    z = newcombe_diff(0, 10, 0, 10)
    assert z.value == 0 and z.lo < 0 < z.hi


def test_newcombe_coverage_tightens_with_samples() -> None:
    rng = np.random.default_rng(0)
    p1, p2 = 0.45, 0.25
    for n in (40, 200):
        hits = 0
        for _ in range(1000):
            e = newcombe_diff(int(rng.binomial(n, p1)), n, int(rng.binomial(n, p2)), n)
            hits += e.lo <= p1 - p2 <= e.hi
        assert 0.92 <= hits / 1000 <= 0.98  # nominal 0.95; SE of the share is ~0.007


def test_katz_rate_ratio_by_hand() -> None:
    e = rate_ratio_ci(47, 100, 7, 100)
    se = math.sqrt(1 / 47 - 1 / 100 + 1 / 7 - 1 / 100)
    assert e.value == pytest.approx(47 / 7)
    assert e.lo == pytest.approx(47 / 7 * math.exp(-1.959964 * se), rel=1e-5)
    assert e.hi == pytest.approx(47 / 7 * math.exp(1.959964 * se), rel=1e-5)
    h = rate_ratio_ci(5, 20, 0, 20)  # a zero cell: Haldane's 0.5 added
    assert h.method == "katz_log_haldane" and h.value == pytest.approx((5.5 / 21) / (0.5 / 21))


def test_fisher_is_scipys_and_controls_type_one_error() -> None:
    assert fisher_exact(3, 10, 8, 10) == pytest.approx(0.0697785, rel=1e-5)
    assert fisher_exact(8, 10, 3, 10, alternative="greater") < fisher_exact(8, 10, 3, 10)
    rng = np.random.default_rng(1)
    rejections = sum(fisher_exact(int(rng.binomial(40, 0.3)), 40, int(rng.binomial(40, 0.3)), 40) <= 0.05
                     for _ in range(600))
    assert rejections / 600 <= 0.06  # conservative test: at most α (+ MC noise)
    with pytest.raises(ValueError):
        fisher_exact(11, 10, 0, 10)


def test_power_formula_and_its_inverse() -> None:
    # (1.96·√(2·0.4·0.6) + 0.8416·√(0.25 + 0.21))² / 0.04 = 92.4 → 93
    assert power_two_prop(0.5, 0.3) == 93
    assert power_two_prop(0.3, 0.5) == 93
    assert power_two_prop(0.5, 0.3, alpha=0.01) > 93
    mde = mde_two_prop(0.5, 93, direction=-1)
    assert 0.19 < mde <= 0.2001
    assert mde_two_prop(0.5, 10, direction=-1) > mde
    assert mde_two_prop(0.99, 5, direction=1) == math.inf
    with pytest.raises(ValueError):
        power_two_prop(0.3, 0.3)


def test_power_formula_delivers_its_power() -> None:
    rng = np.random.default_rng(2)
    n = power_two_prop(0.5, 0.3)
    hits = sum(fisher_exact(int(rng.binomial(n, 0.5)), n, int(rng.binomial(n, 0.3)), n) <= 0.05 for _ in range(400))
    assert 0.70 <= hits / 400 <= 0.90  # planned for 0.8 with a z-test; Fisher is a little conservative


def test_cochran_armitage_by_hand() -> None:
    # p̄ = 0.3, T = 4, Var = 0.21·(50 − 30) = 4.2 → z = 4/√4.2
    z, p = cochran_armitage([0, 1, 2], [1, 3, 5], [10, 10, 10])
    assert z == pytest.approx(4 / math.sqrt(4.2))
    assert p == pytest.approx(0.050962, rel=1e-4)
    assert cochran_armitage([0, 1], [0, 0], [5, 5]) == (0.0, 1.0)
    z2, _ = cochran_armitage([0, 1, 2], [5, 3, 1], [10, 10, 10])
    assert z2 == pytest.approx(-z)
