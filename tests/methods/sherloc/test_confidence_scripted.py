"""The confidence filter (fit on data with a known answer; never given the gold patch) and the scripted arms."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.stats import auroc
from agentmill.methods.sherloc import ConfidenceModel, injection_decision
from agentmill.methods.sherloc.confidence import FEATURES
from agentmill.methods.sherloc.scripted import function_extent, issue_identifiers


@pytest.mark.parametrize("method", ["logistic", "naive_bayes"])
def test_filter_learns_a_planted_signal(method: str) -> None:
    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, len(FEATURES)))
    X[:, 2] += 2.0 * y  # grounding carries the signal; the rest is noise
    m = ConfidenceModel().fit(X[:200], y[:200], method=method)
    p = np.array([m.predict(x) for x in X[200:]])
    assert auroc(p, y[200:]) > 0.85 and ((p >= 0) & (p <= 1)).all()
    shuffled = ConfidenceModel().fit(X[:200], rng.permutation(y[:200]), method=method)
    q = np.array([shuffled.predict(x) for x in X[200:]])
    assert auroc(q, y[200:]) < 0.75  # labels shuffled: no better than weak chance agreement


def test_injection_decision() -> None:
    assert injection_decision(0.9, 0.8, 0.5) == "full"
    assert injection_decision(0.6, 0.8, 0.5) == "locations"
    assert injection_decision(0.1, 0.8, 0.5) == "none"
    with pytest.raises(ValueError):
        injection_decision(0.5, 0.4, 0.6)


def test_issue_identifiers_and_function_extent() -> None:
    issue = ("FAILED tests/test_ops.py::test_clamp\ntests/test_ops.py:6: in test_clamp\n"
             "    assert clamp(-1, 0, 10) == 0\nE   assert None == 0\n")
    assert issue_identifiers(issue)[0] == "clamp"
    lines = [(4, "def clamp(x, lo, hi):"), (5, "    if x < lo:"), (6, "        return lo"), (7, ""), (8, "def g():")]
    assert function_extent(lines, 4) == (4, 6)
