"""ECE / AUROC by hand, and STS recovering a known temperature from synthetically miscalibrated confidences."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.dspark.calibration import (calibrate_sts, confidence_metrics, ece, prefix_labels, sigmoid,
                                                   survival)


def test_ece_by_hand():
    # two bins used: [0.2 → labels mean 0.5] and [0.9 → labels mean 1.0]
    pred = np.array([0.2, 0.2, 0.9, 0.9])
    lab = np.array([0, 1, 1, 1])
    assert ece(pred, lab, bins=10) == pytest.approx(0.5 * 0.3 + 0.5 * 0.1)


def test_confidence_metrics_skip_a_position_with_one_class():
    # position 0: positives .9, .6 vs negative .2 → AUROC 1; position 1: no positive → NaN, left out of the mean
    pred = np.array([[0.9, 0.5], [0.6, 0.4], [0.2, 0.1]])
    lab = np.array([[1, 0], [1, 0], [0, 0]])
    m = confidence_metrics(pred, lab)
    assert m["per_position"]["auroc"][0] == 1.0 and np.isnan(m["per_position"]["auroc"][1])
    assert m["auroc"] == 1.0


def test_prefix_labels():
    assert prefix_labels([0, 2, 3], 3).tolist() == [[0, 0, 0], [1, 1, 0], [1, 1, 1]]


def test_sts_recovers_a_known_temperature():
    """True step acceptance probabilities σ(z/T*) with T* = 2.5 per position; the head reports z (over-confident).
    STS must find temperatures near 2.5, cut ECE, and keep the ranking."""
    rng = np.random.default_rng(0)
    n, g, t_true = 40_000, 4, 2.5
    z = rng.normal(1.0, 3.0, size=(n, g))
    step_ok = rng.random((n, g)) < sigmoid(z / t_true)
    accepted = np.where(step_ok.all(1), g, np.argmin(step_ok, axis=1))
    temps = calibrate_sts(z, accepted)
    assert np.all(np.abs(temps - t_true) / t_true < 0.15), temps
    y = prefix_labels(accepted, g)
    before = confidence_metrics(survival(z), y)
    after = confidence_metrics(survival(z, temps), y)
    assert after["ece"] < 0.02 < before["ece"]
    # scaling one logit keeps the ranking of that position exactly; products over positions may reorder a little
    assert after["per_position"]["auroc"][0] == pytest.approx(before["per_position"]["auroc"][0], abs=1e-12)
    assert after["auroc"] == pytest.approx(before["auroc"], abs=0.01)


def test_sts_rejects_empty_input():
    with pytest.raises(ValueError):
        calibrate_sts(np.zeros((0, 3)), [])
