import math

import numpy as np
import pytest
from scipy import stats

from agentmill.methods.autocog.gate import welch_gate
from agentmill.methods.autocog.metrics import MetricValue
from agentmill.methods.autocog.scoring import aggregate_loss, leaderboard, normalized_distances


def test_welch_matches_closed_form() -> None:
    a, b = MetricValue(0.7, 0.04, None), MetricValue(0.5, 0.09, None)
    g = welch_gate(a, b)
    t = (0.7 - 0.5) / math.sqrt((0.04 + 0.09) / 25)
    df = (0.04 + 0.09) ** 2 * 24 / (0.04 ** 2 + 0.09 ** 2)  # Welch–Satterthwaite closed form
    assert g.t == pytest.approx(t) and g.df == pytest.approx(df)
    assert g.p == pytest.approx(2 * stats.t.sf(abs(t), df))
    assert g.accepted == (g.p < 0.01)


def test_gate_edge_cases() -> None:
    assert not welch_gate(MetricValue(0.5, 0.0, None), MetricValue(0.5, 0.0, None)).accepted  # NaN p counts as 1
    assert welch_gate(MetricValue(0.5, 0.0, None), MetricValue(0.5, 0.0, None)).p == 1.0
    assert not welch_gate(MetricValue(0.5, None, None), MetricValue(0.9, 0.01, None)).accepted
    assert not welch_gate(MetricValue(0.51, 0.04, None), MetricValue(0.5, 0.04, None)).accepted


def test_scoring_rules_ac5() -> None:
    assert normalized_distances(0.5, {"a": 0.4, "b": 0.6}) == {"a": 0.0, "b": 0.0}  # ties -> 0
    assert normalized_distances(0.5, {"a": 0.5, "b": None, "c": 0.9}) == {"a": 0.0, "b": 1.0, "c": 1.0}
    assert normalized_distances(None, {"a": 0.5}) == {"a": 1.0}
    obs = [(0.5, {"a": 0.5, "b": 0.9, "c": 0.6}), (0.2, {"a": 0.3, "b": 0.2, "c": 0.6})]
    lb = dict(leaderboard(obs, ["a", "b", "c"]))
    # n_a = (0, .25), n_b = (1, 0), n_c = (.25, 1): norms .25, 1, 1.0308 -> scores 1-norm/max
    assert lb["c"] == 0.0 and lb["a"] == pytest.approx(1 - 0.25 / math.hypot(0.25, 1))
    assert dict(leaderboard([(0.5, {"a": 0.5, "b": 0.5})], ["a", "b"])) == {"a": 1.0, "b": 1.0}  # all norms 0
    assert dict(leaderboard([(None, {"a": 0.1, "b": 0.5})], ["a", "b"])) == {"a": 1.0, "b": 1.0}  # excluded
    # "paper": a missing real value scores everyone 1, so equal non-zero norms -> everyone 0
    assert dict(leaderboard([(None, {"a": 0.1, "b": 0.5})], ["a", "b"], on_missing_real="paper")) == \
        {"a": 0.0, "b": 0.0}
    # aggregate loss: spread-0 -> raw distance; failed candidate -> 1; no real -> inf
    assert aggregate_loss([0.5], [(0.5, {"a": 0.5})]) == 0.0
    assert aggregate_loss([None], [(0.5, {"a": 0.4})]) == 1.0
    assert aggregate_loss([0.3], [(None, {})]) == math.inf
    assert aggregate_loss([0.3], [(0.5, {"a": 0.7})]) == pytest.approx(0.2 / 0.4)
