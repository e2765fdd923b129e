"""Prospective scores, per-participant classification and declared properties, on inputs small enough to check
by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.classify import classify, strategy_loglik, strategy_shares
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.loop import LoopConfig
from agentmill.methods.autocog.properties import DECLARED, check_properties
from agentmill.methods.autocog.scoring import prospective_scores
from agentmill.methods.autocog.simulate import Data

V = (0.9, 0.8, 0.7, 0.6)


def test_prospective_scores_by_hand() -> None:
    obs = [(1, 0.5, {"s1": 0.5, "s2": 0.9, "n": 0.5}), (2, 0.2, {"s1": 0.2, "s2": 0.3, "n": 0.6})]
    ps = prospective_scores(obs, {"s1": 0, "s2": 0, "n": 1, "late": 2})
    # seeds: both rounds; norms s1 0, s2 √(1 + .25²) = 1.0308, n 1 → s1 1, s2 0
    assert ps["s1"] == 1.0 and ps["s2"] == 0.0
    # n (admitted after round 1): round 2 only; normalised .0/.25/1 → n scores 0 (in-sample it would be .03)
    assert ps["n"] == 0.0
    assert ps["late"] is None  # no post-admission data
    # a failed real value is skipped under "exclude"
    assert prospective_scores([(2, None, {"a": 0.1})], {"a": 1})["a"] is None


def _design() -> Design:
    # pair 0: TTB picks A (top cue), Tallying picks B (1 vs 2 cues); pair 1: both pick A. K = 2 → 4 trials
    return Design.make(V, [(1, 0, 0, 0), (1, 1, 0, 0)], [(0, 1, 1, 0), (0, 0, 0, 0)], max_trials=4)


def test_strategy_loglik_by_hand() -> None:
    ll, e = strategy_loglik(np.array([1, 1, 0, 1], bool), np.ones(4, bool))
    assert e == 0.25 and ll == pytest.approx(math.log(0.25) + 3 * math.log(0.75))
    ll, e = strategy_loglik(np.array([1, 0], bool), np.array([1, 0], bool))  # 1 informative (followed), 1 tie
    assert e == 0.0 and ll == pytest.approx(math.log(0.5))
    with pytest.raises(ValueError):
        strategy_loglik(np.ones(3, bool), np.ones(4, bool))


def test_classify_by_hand() -> None:
    resp = np.array([[0, 0, 0, 0],   # follows TTB on every trial
                     [1, 0, 1, 0],   # follows Tallying on every trial
                     [1, 1, 1, 1]])  # both strategies err on half → no better than guessing
    data = Data(_design(), np.tile([0, 1, 0, 1], (3, 1)), resp)
    c = classify(data, {"ttb": L.ttb(), "tallying": L.tallying()})
    assert [x.strategy for x in c] == ["ttb", "tallying", "guess"]
    assert c[0].error == 0.0 and c[0].errors["tallying"] == 0.5
    assert c[0].loglik["tallying"] == pytest.approx(4 * math.log(0.5))
    assert strategy_shares(c) == {"ttb": 1 / 3, "tallying": 1 / 3, "guess": 1 / 3}
    with pytest.raises(ValueError):
        classify(data, {})


def test_classify_separates_a_mixture_population() -> None:
    """Pitfall 18: 10 TTB users + 10 WADD users on conflict items are classified as such, not as one dial."""
    from agentmill.methods.autocog.simulate import simulate

    # pairs where TTB (top cue) and WADD (.8+.7+.6 > .9) disagree, plus agreement items
    d = Design.make(V, [(1, 0, 0, 0), (1, 0, 0, 0), (1, 1, 0, 0)], [(0, 1, 1, 1), (0, 1, 1, 0), (0, 0, 1, 1)])
    ttb, wadd = L.ttb(beta=20.0, eps=0.0), L.wadd(beta=20.0, eps=0.0)
    data_t, data_w = simulate(ttb, d, 10, 0), simulate(wadd, d, 10, 1)
    strategies = {"ttb": L.ttb(), "wadd": L.wadd(), "dial3": L.dial(gamma=3.0)}
    assert [x.strategy for x in classify(data_t, strategies)] == ["ttb"] * 10
    assert {x.strategy for x in classify(data_w, strategies)} == {"wadd"}


def test_declared_properties_hold_for_the_library() -> None:
    for name, props in DECLARED.items():
        for r in check_properties(L.REGISTRY[name](), props, n_cardinal=200):
            assert r.holds, (name, r)


def test_properties_find_counterexamples() -> None:
    lex = check_properties(L.wadd(), ["lexicographic"])[0]
    assert not lex.holds and lex.counterexample is not None
    a, b, _ = lex.counterexample
    assert len(a) == len(b) == 4
    mono = check_properties(L.anti_majority(), ["monotone"])[0]
    assert not mono.holds
    sym = check_properties(L.cue_parity(), ["symmetric"])[0]
    assert not sym.holds
    assert check_properties(L.ttb(), ["scale_invariant"], rating_max=1)[0].n_checked == 0  # nothing fits 2× on 0/1
    with pytest.raises(ValueError, match="unknown properties"):
        check_properties(L.ttb(), ["convex"])


def test_loop_config_gate_choice() -> None:
    assert "gate" not in LoopConfig().ledger_json()  # Welch runs keep their ledgered config
    assert LoopConfig(gate="power").ledger_json()["gate"] == "power"
    with pytest.raises(ValueError, match="LoopConfig.gate"):
        LoopConfig(gate="bayes")
