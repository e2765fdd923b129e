"""JSD (static/sequence) and the alternative gates (power, JSD) (``methods.autocog.gate``) on hand-checkable data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.gate import calibrate_jsd_threshold, jsd_gate, power_gate, welch_gate
from agentmill.methods.autocog.jsd import jsd, sequence_jsd, static_jsd
from agentmill.methods.autocog.metrics import MetricValue
from agentmill.methods.autocog.simulate import Data

V = (0.9, 0.8, 0.7, 0.6)


def test_jsd_by_hand() -> None:
    assert jsd(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(math.log(2))
    assert jsd(np.array([0.3, 0.7]), np.array([0.3, 0.7])) == 0.0
    # m = (.75, .25): ½[.5 ln(.5/.75) + .5 ln(.5/.25)] + ½ ln(1/.75) = 0.215762
    assert jsd(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == pytest.approx(0.215762, abs=1e-6)
    with pytest.raises(ValueError, match="probability vector"):
        jsd(np.array([0.5, 0.6]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="equal length"):
        jsd(np.array([1.0]), np.array([1.0]))


def _design() -> Design:  # 2 unique pairs, K = 2 → 4 trials
    return Design.make(V, [(1, 0, 0, 0), (1, 1, 0, 0)], [(0, 1, 1, 0), (0, 0, 0, 0)], max_trials=4)


def _data(resp) -> Data:
    resp = np.asarray(resp)
    return Data(_design(), np.tile([0, 1, 0, 1], (len(resp), 1)), resp)


def test_static_and_sequence_jsd_by_hand() -> None:
    all_a, all_b = _data([[0, 0, 0, 0]] * 2), _data([[1, 1, 1, 1]] * 2)
    assert static_jsd(all_a, all_b) == pytest.approx(math.log(2))
    assert sequence_jsd(all_a, all_b) == pytest.approx(math.log(2))  # (A,A) vs (B,B) at every position
    alt = _data([[0, 1, 0, 1]] * 2)  # pair 0 always A, pair 1 always B
    assert static_jsd(alt, all_a) == pytest.approx(math.log(2) / 2)  # pair 0 agrees, pair 1 opposite
    assert static_jsd(alt, alt) == 0.0 and sequence_jsd(alt, alt) == 0.0
    other = Data(Design.make(V, [(1, 0, 0, 0)], [(0, 0, 0, 0)], max_trials=4), np.zeros((1, 4), int),
                 np.zeros((1, 4), int))
    with pytest.raises(ValueError, match="different designs"):
        static_jsd(alt, other)


def test_jsd_gate_accepts_only_above_threshold() -> None:
    all_a, all_b = _data([[0, 0, 0, 0]] * 2), _data([[1, 1, 1, 1]] * 2)
    g = jsd_gate(all_a, all_b, kind="static")
    assert g.accepted and g.stat == pytest.approx(math.log(2)) and g.kind == "jsd_static"
    g2 = jsd_gate(all_a, all_a, kind="sequence")
    assert not g2.accepted and g2.stat == 0.0 and "threshold" in g2.reason
    with pytest.raises(ValueError, match="kind"):
        jsd_gate(all_a, all_b, kind="lag2")


def test_welch_payload_has_no_stat_field() -> None:
    g = welch_gate(MetricValue(0.2, 0.01, None), MetricValue(0.8, 0.01, None))
    assert g.accepted and "stat" not in g.to_json()


def test_power_gate_extremes_and_missing_variance() -> None:
    rng = np.random.default_rng(0)
    sep = power_gate(MetricValue(0.0, 0.0, np.zeros(50)), MetricValue(1.0, 0.0, np.ones(50)), rng=rng)
    assert sep.accepted and sep.stat == 1.0 and sep.kind == "power"
    same = power_gate(MetricValue(0.5, 0.25, np.array([0.0, 1.0] * 25)), MetricValue(0.5, 0.25, np.array([0.0, 1.0] * 25)),
                      rng=rng)
    assert not same.accepted and same.stat < 0.05
    miss = power_gate(MetricValue(0.5, None, None), MetricValue(0.6, 0.1, None), rng=rng)
    assert not miss.accepted and miss.kind == "power"


def test_power_gate_sees_the_plug_in_gates_half_power() -> None:
    """Pitfall 1: a design whose expected Welch t sits at the critical value has about 50% power; the plug-in gate
    accepts it (p just below α), the power gate at target .8 does not. Normal draws (no per-subject values)."""
    from scipy import stats

    n, df = 25, 48
    d = stats.t.ppf(1 - 0.01 / 2, df) * math.sqrt(2 / n) * 1.01  # t* just above the critical value, σ = 1
    a, b = MetricValue(0.0, 1.0, None), MetricValue(d, 1.0, None)
    assert welch_gate(a, b).accepted
    g = power_gate(a, b, n_mc=4000, rng=np.random.default_rng(1))
    assert 0.42 < g.stat < 0.58 and not g.accepted  # MC s.e. ≈ .008


def test_calibrate_jsd_threshold_small() -> None:
    out = calibrate_jsd_threshold([(L.ttb(), L.wadd())], n_designs=2, n_runs=10, seed=0)
    assert out["n"] == 2 and len(out["jsds"]["static"]) == 2
    assert 0 <= out["static_median"] <= math.log(2) and 0 <= out["sequence_median"] <= math.log(2)
    with pytest.raises(ValueError):
        calibrate_jsd_threshold([], n_designs=2)
