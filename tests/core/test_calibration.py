"""core.calibration: PRR, Brier, ECE on hand-checkable cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.core.calibration import brier, ece, prr, rejection_curve, reliability_bins


def test_rejection_curve_by_hand() -> None:
    # scores 0.9, 0.8, 0.1, 0.2 with labels 1, 0, 0, 1: keep all → 0.5; reject 0.1 → 2/3; reject 0.2 too → 1/2;
    # keep only 0.9 → 1
    q = rejection_curve([0.9, 0.8, 0.1, 0.2], [1, 0, 0, 1])
    assert q.tolist() == pytest.approx([0.5, 2 / 3, 0.5, 1.0])


def test_prr_perfect_random_reversed() -> None:
    y = np.array([1, 1, 0, 0, 0, 1, 0, 0])
    assert prr(y.astype(float), y) == pytest.approx(1.0)
    assert prr(-y.astype(float), y) < -0.8  # rejecting the right ones first: near −1 (−0.848 here)
    assert prr(np.zeros(8), y) == pytest.approx(0.0)  # one tie block: the flat random curve
    rng = np.random.default_rng(0)
    yy = rng.random(4000) < 0.3
    assert abs(prr(rng.random(4000), yy)) < 0.1


def test_prr_ignores_order_inside_ties_and_is_nan_without_both_labels() -> None:
    s = np.array([0.5, 0.5, 0.5, 0.9])
    assert prr(s, [1, 0, 0, 1]) == pytest.approx(prr(s[[2, 1, 0, 3]], [0, 0, 1, 1]))
    assert math.isnan(prr([0.1, 0.2], [1, 1]))
    with pytest.raises(ValueError):
        prr([0.1, float("nan")], [1, 0])


def test_brier_and_ece_by_hand() -> None:
    assert brier([1.0, 0.0, 0.5], [1, 0, 1]) == pytest.approx(0.25 / 3)
    # bins of width 0.5: {0.2, 0.4} with labels {0, 1} → |0.3 − 0.5| = 0.2; {0.9} with 1 → 0.1
    assert ece([0.2, 0.4, 0.9], [0, 1, 1], bins=2) == pytest.approx((2 * 0.2 + 0.1) / 3)
    assert ece([1.0], [1], bins=10) == 0.0  # 1.0 falls in the last bin
    with pytest.raises(ValueError):
        ece([1.2], [1])
    assert reliability_bins([0.2, 0.4, 0.9], [0, 1, 1], bins=2) == [(pytest.approx(0.3), 0.5, 2), (0.9, 1.0, 1)]


def test_dspark_ece_is_the_core_one_with_its_20_bins() -> None:
    from agentmill.methods.dspark.calibration import ece as dspark_ece

    rng = np.random.default_rng(1)
    p = rng.random(500)
    y = rng.random(500) < p
    assert dspark_ece(p, y) == ece(p, y, bins=20) != ece(p, y)
    with pytest.raises(ValueError, match="probabilities"):
        dspark_ece(p + 1, y)


def test_calibrated_scores_have_small_ece_statistically() -> None:
    # labels drawn from the scores: ECE shrinks like 1/sqrt(n), so the bound tightens with samples
    for n, bound in ((2000, 0.06), (20000, 0.02)):
        rng = np.random.default_rng(n)
        p = rng.random(n)
        assert ece(p, rng.random(n) < p) < bound
