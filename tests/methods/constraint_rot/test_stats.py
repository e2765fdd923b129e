"""ConstraintRot statistics on hand-checkable inputs: Wilson by the closed form, McNemar against scipy's binomial
test, Holm on a known list, the two-stage bootstrap's determinism and pairing, the crossing decomposition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from agentmill.methods.constraint_rot.stats import (bootstrap_samples, cluster_bootstrap, holm, mcnemar_exact,
                                                    variance_decomposition, wilson)


# -- Wilson ----------------------------------------------------------------------------------------------------------
def test_wilson_3_of_10_by_hand():
    # p = 0.3, z² = 3.8416, 1 + z²/n = 1.38416; centre = (0.3 + 0.19208)/1.38416 = 0.355508;
    # half = 1.96·sqrt(0.021 + 0.009604)/1.38416 = 0.247717
    lo, hi = wilson(3, 10)
    assert lo == pytest.approx(0.355508 - 0.247717, abs=2e-5)
    assert hi == pytest.approx(0.355508 + 0.247717, abs=2e-5)


def test_wilson_at_zero_and_n():
    # k = 0: centre = half-width = (z²/2n)/(1 + z²/n), so lo = 0, hi = (z²/n)/(1 + z²/n) = 0.38416/1.38416
    assert wilson(0, 10) == pytest.approx((0.0, 0.38416 / 1.38416), abs=1e-6)
    lo, hi = wilson(10, 10)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(1 - 0.38416 / 1.38416, abs=1e-6)


def test_wilson_other_z_and_bad_input():
    lo, hi = wilson(5, 10, z=1.0)  # p = .5: centre .5, half = sqrt(.025 + .0025)/1.1 = 0.150756
    assert (lo, hi) == pytest.approx((0.5 - 0.150756, 0.5 + 0.150756), abs=1e-5)
    with pytest.raises(ValueError):
        wilson(11, 10)
    with pytest.raises(ValueError):
        wilson(1, 0)
    with pytest.raises(ValueError):
        wilson(1.5, 10)  # type: ignore[arg-type]


# -- McNemar ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("b,c,same", [(6, 0, 3), (5, 2, 10), (1, 1, 0), (12, 3, 5)])
def test_mcnemar_matches_binomtest(b, c, same):
    a_seq = [1] * b + [0] * c + [1] * same
    b_seq = [0] * b + [1] * c + [1] * same
    res = mcnemar_exact(a_seq, b_seq)
    assert (res.b, res.c, res.n_pairs) == (b, c, b + c + same)
    assert res.p_value == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-12)


def test_mcnemar_six_discordant_by_hand_and_no_discordant():
    assert mcnemar_exact([1] * 6, [0] * 6).p_value == pytest.approx(2 * 0.5 ** 6)  # 0.03125
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]).p_value == 1.0
    with pytest.raises(ValueError, match="equal length"):
        mcnemar_exact([1, 0], [1])
    with pytest.raises(ValueError, match="binary"):
        mcnemar_exact([2], [1])


# -- Holm ------------------------------------------------------------------------------------------------------------
def test_holm_known_list():
    # sorted 0.005·4 = .02, 0.01·3 = .03, 0.03·2 = .06, 0.04·1 = .04 → running max .06
    res = holm([0.01, 0.04, 0.03, 0.005])
    assert [r.p_adjusted for r in res] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [r.reject for r in res] == [True, False, False, True]
    named = holm({"CR-3": 0.2, "CR-4": 0.6})
    assert [(r.name, r.p_adjusted) for r in named] == [("CR-3", pytest.approx(0.4)), ("CR-4", pytest.approx(0.6))]
    with pytest.raises(ValueError, match="CR-9"):
        holm({"CR-9": 1.5})


# -- two-stage cluster bootstrap -------------------------------------------------------------------------------------
def _rows():
    """4 families × 3 episodes × conditions a and b. V(a) = 1 on episodes 0, 1 of every family; V(b) is V(a) on
    the same episode except family f3, episode 0."""
    rows = []
    for f in range(4):
        for e in range(3):
            va = int(e < 2)
            vb = 0 if (f == 3 and e == 0) else va
            rows.append({"family": f"f{f}", "episode_id": f"f{f}e{e}", "condition": "a", "violation": va})
            rows.append({"family": f"f{f}", "episode_id": f"f{f}e{e}", "condition": "b", "violation": vb})
    return rows


def _v(cond):
    def stat(rows):
        xs = [r["violation"] for r in rows if r["condition"] == cond]
        if not xs:
            raise ValueError("empty")
        return sum(xs) / len(xs)
    return stat


def test_bootstrap_deterministic_by_seed():
    rows = _rows()
    a = cluster_bootstrap(rows, _v("a"), B=300, seed=0)
    b = cluster_bootstrap(rows, _v("a"), B=300, seed=0)
    c = cluster_bootstrap(rows, _v("a"), B=300, seed=1)
    assert a == b
    assert a.value == pytest.approx(8 / 12) and a.n == 4
    assert a.lo < a.value < a.hi
    assert (c.lo, c.hi) != (a.lo, a.hi) or not np.array_equal(
        bootstrap_samples(rows, [_v("a")], B=300, seed=0), bootstrap_samples(rows, [_v("a")], B=300, seed=1))


def test_bootstrap_resamples_whole_episodes_so_differences_are_paired():
    rows = _rows()
    # every resample holds both conditions of each drawn episode: the count of a-rows equals that of b-rows
    count = lambda rs: sum(r["condition"] == "a" for r in rs) - sum(r["condition"] == "b" for r in rs)  # noqa: E731
    assert set(bootstrap_samples(rows, [count], B=200, seed=0)[:, 0]) == {0.0}
    d = cluster_bootstrap(rows, _v("a"), paired_with=_v("b"), B=500, seed=0)
    assert d.value == pytest.approx(1 / 12)
    assert d.method == "paired_cluster_bootstrap"
    # paired: the difference is only ever 0 or positive (one discordant episode), never the noise of two
    # independent resamples of a rate that varies between 0.33 and 1
    boots = bootstrap_samples(rows, [_v("a"), _v("b")], B=500, seed=0)
    assert (boots[:, 0] - boots[:, 1] >= 0).all()
    assert d.lo == 0.0 and 1 / 12 < d.hi < 0.5


def test_bootstrap_identical_conditions_give_degenerate_interval():
    rows = [r for r in _rows() if not (r["family"] == "f3")]  # there a == b on every episode
    d = cluster_bootstrap(rows, _v("a"), paired_with=_v("b"), B=200, seed=0)
    assert (d.value, d.lo, d.hi) == (0.0, 0.0, 0.0)


def test_bootstrap_two_stages_resample_episodes_within_a_single_family():
    rows = [r for r in _rows() if r["family"] == "f0"]  # one family: only the episode stage can vary V
    e = cluster_bootstrap(rows, _v("a"), B=400, seed=0)
    assert e.n == 1 and e.lo < e.hi  # a one-stage cluster bootstrap would give lo == hi here


def test_bootstrap_undefined_resamples_are_dropped_and_counted():
    rows = _rows() + [{"family": "f9", "episode_id": "x", "condition": "c", "violation": 1}]
    e = cluster_bootstrap(rows, _v("c"), B=200, seed=0)  # f9 absent from many resamples → stat undefined there
    assert e.value == 1.0 and e.method.startswith("cluster_bootstrap(dropped=")
    dropped = int(e.method.split("=")[1].rstrip(")"))
    assert 0 < dropped < 200


def test_bootstrap_bad_input():
    with pytest.raises(ValueError, match="'family'"):
        cluster_bootstrap([{"episode_id": "e", "violation": 1}], _v("a"), B=10)
    with pytest.raises(ValueError, match="no rows"):
        cluster_bootstrap([], _v("a"), B=10)
    with pytest.raises(ValueError, match="B must"):
        cluster_bootstrap(_rows(), _v("a"), B=0)


# -- variance decomposition ------------------------------------------------------------------------------------------
def test_variance_decomposition_by_hand():
    # grand .45; row means .1, .8 → SS_rows = 2·(.35² + .35²) = .49; col means .3, .6 → SS_cols = 2·2·.15² = .09;
    # SS_total = .45² + .25² + .15² + .55² = .59
    vd = variance_decomposition([[0.0, 0.2], [0.6, 1.0]])
    assert (vd.ss_rows, vd.ss_cols, vd.ss_total) == pytest.approx((0.49, 0.09, 0.59))
    assert vd.eta2_S == pytest.approx(0.49 / 0.59) and vd.eta2_A == pytest.approx(0.09 / 0.59)
    assert vd.eta2_interaction == pytest.approx(0.01 / 0.59)


def test_variance_decomposition_extremes_and_dict_input():
    assert variance_decomposition([[0, 0], [1, 1]]).eta2_S == pytest.approx(1.0)
    pure = variance_decomposition({"window": {"rr": 0, "org": 1}, "extractive": {"rr": 1, "org": 0}})
    assert (pure.eta2_S, pure.eta2_A) == pytest.approx((0.0, 0.0))
    assert math.isnan(variance_decomposition([[0.5, 0.5], [0.5, 0.5]]).eta2_S)
    with pytest.raises(ValueError, match="missing"):
        variance_decomposition({"window": {"rr": 0, "org": 1}, "extractive": {"rr": 1}})
    with pytest.raises(ValueError, match="2 x 2"):
        variance_decomposition([[0.1, 0.2]])
