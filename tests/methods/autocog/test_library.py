import itertools

import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.theory import Interval, ParamSpace, VectorInterval

V = (0.9, 0.8, 0.7, 0.6)
CTX = {"validities": np.array(V), "n_features": 4, "rating_max": 1}


def _pairs():
    vecs = list(itertools.product((0, 1), repeat=4))
    P = [(a, b) for a in vecs for b in vecs if a != b]
    return np.array([p[0] for p in P], float)[None], np.array([p[1] for p in P], float)[None]


def _p(theory, **pin):
    p = theory.params.midpoint(CTX)
    p.update({k: np.array([v]) for k, v in pin.items()})
    A, B = _pairs()
    return theory.prob_batch(p, A, B, CTX)[0]


def test_ttb_by_hand() -> None:
    t = L.ttb()
    p = {"beta": np.array([2.0]), "eps": np.array([0.2]), "validities": np.array([V])}
    A = np.array([[[0, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]], float)
    B = np.array([[[1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 1, 1]]], float)
    got = t.prob_batch(p, A, B, CTX)[0]
    hi = 0.8 / (1 + np.exp(-2)) + 0.1  # Δ = +1 -> (1-ε)σ(β) + ε/2
    assert got[0] == pytest.approx(1 - hi)  # top cue favours B
    assert got[1] == 0.5  # no discriminating cue -> exactly 1/2
    assert got[2] == pytest.approx(hi)  # second cue decides for A


def test_dial_endpoints_decisions() -> None:
    sgn = lambda x: np.sign(np.round(x - 0.5, 12))  # noqa: E731
    assert (sgn(_p(L.dial(), gamma=1.0, beta=5.0, eps=0.0)) == sgn(_p(L.wadd(), beta=5.0, eps=0.0))).all()
    assert (sgn(_p(L.dial(), gamma=0.0, beta=5.0, eps=0.0)) == sgn(_p(L.tallying(), beta=5.0, eps=0.0))).all()
    assert (sgn(_p(L.dial(), gamma=6.0, beta=5.0, eps=0.0)) == sgn(_p(L.ttb(), beta=5.0, eps=0.0))).all()
    # at γ = 3 the dial is neither ([D]: 10 mismatches with each)
    assert (sgn(_p(L.dial(), gamma=3.0, beta=5.0, eps=0.0)) != sgn(_p(L.wadd(), beta=5.0, eps=0.0))).sum() == 10


def test_lapse_bounds() -> None:
    p = _p(L.wadd(), beta=20.0, eps=0.5)
    assert p.min() >= 0.25 - 1e-12 and p.max() <= 0.75 + 1e-12  # ε = .5 is not uniform (the noise model [C])


def test_spec_roundtrip_and_overrides() -> None:
    for name, f in L.REGISTRY.items():
        t = f()
        assert L.theory_from_spec(t.spec).content_id == t.content_id, name
    t = L.dial(gamma=3.0, beta=Interval(3, 20))
    assert t.params.specs["gamma"] == 3.0 and L.theory_from_spec(t.spec).content_id == t.content_id
    with pytest.raises(ValueError, match="no parameter"):
        L.ttb(gamma=1.0)


def test_param_space_parsing() -> None:
    ps = ParamSpace.from_repo_strings({"beta": "[0.1, 20]", "k": "{1, 2}", "v": "validities",
                                       "w": "[(0, 1)] * n_features"})
    assert ps.specs["beta"] == Interval(0.1, 20) and ps.specs["w"] == VectorInterval(0, 1)
    draws = ps.sample(np.random.default_rng(0), CTX, 1000)
    assert draws["w"].shape == (1000, 4) and set(np.unique(draws["k"])) == {1, 2}
    assert 0.1 <= draws["beta"].min() and draws["beta"].max() <= 20
    with pytest.raises(ValueError, match="lo > hi"):
        ParamSpace.from_repo_strings({"beta": "[20, 0.1]"})
    with pytest.raises(ValueError, match="accepted forms"):
        ParamSpace.from_repo_strings({"beta": "__import__('os')"})


def test_grammar_counts_and_points() -> None:
    assert len(L.families(False)) == 12 and len(L.families(True)) == 45
    # lexicographic program == TTB, additive-validity program == WADD (same parameters)
    np.testing.assert_allclose(_p(L.program("identity", "validity", "lexicographic"), beta=3.0, eps=0.1),
                               _p(L.ttb(), beta=3.0, eps=0.1))
    np.testing.assert_allclose(_p(L.program("identity", "validity", "additive"), beta=3.0, eps=0.1),
                               _p(L.wadd(), beta=3.0, eps=0.1))
