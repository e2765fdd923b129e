from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from agentmill.core.stats import (Estimate, bootstrap_ci, mean_estimate, paired_diff, proportion_estimate, tost)


def test_estimate_validates_and_roundtrips() -> None:
    e = Estimate(0.5, 0.4, 0.6, n=10, method="bootstrap")
    assert Estimate.from_dict(e.to_dict()) == e
    assert Estimate.exact(3).lo == Estimate.exact(3).hi == 3.0
    with pytest.raises(ValueError, match="lo <= value <= hi"):
        Estimate(1.0, 0.0, 0.5)
    assert e.fmt() == "0.5 [0.4, 0.6]" and Estimate.exact(2).fmt() == "2"


def test_bootstrap_ci_of_hand_checkable_sample() -> None:
    e = bootstrap_ci([1.0, 1.0, 1.0])
    assert (e.value, e.lo, e.hi) == (1.0, 1.0, 1.0)
    e = mean_estimate([0.0, 1.0] * 50, seed=1)
    assert e.value == 0.5 and 0.35 < e.lo < 0.5 < e.hi < 0.65


def test_bootstrap_ci_coverage_is_near_nominal() -> None:
    """Over 200 normal samples of size 40, the 95% interval covers the true mean ~95% of the time."""
    rng = np.random.default_rng(0)
    hits = 0
    for i in range(200):
        x = rng.normal(2.0, 1.0, 40)
        e = bootstrap_ci(x, n_boot=1000, seed=i)
        hits += e.lo <= 2.0 <= e.hi
    # percentile bootstrap under-covers slightly at n=40; accept anything consistent with 0.90..0.97
    assert binomtest(hits, 200, 0.93).pvalue > 0.001


def test_bootstrap_handles_non_vectorised_stat() -> None:
    e = bootstrap_ci([1.0, 2.0, 3.0, 4.0], stat=lambda a: float(np.median(a)), n_boot=200)
    assert e.value == 2.5 and e.lo <= 2.5 <= e.hi


@pytest.mark.parametrize("bad", [[], [np.nan, 1.0], [[1.0, 2.0]]])
def test_bootstrap_rejects_bad_samples(bad) -> None:
    with pytest.raises(ValueError):
        bootstrap_ci(bad)


def test_wilson_interval_by_hand() -> None:
    e = proportion_estimate(0, 10)
    assert e.value == 0 and e.lo == 0 and 0.27 < e.hi < 0.29  # Wilson upper bound for 0/10 is 0.2775
    e = proportion_estimate(5, 10)
    assert abs(e.lo - 0.2366) < 1e-3 and abs(e.hi - 0.7634) < 1e-3
    with pytest.raises(ValueError):
        proportion_estimate(11, 10)


def test_paired_diff_is_tighter_than_unpaired_when_pairs_correlate() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(0, 5, 100)
    a, b = base + 1.0 + rng.normal(0, 0.1, 100), base + rng.normal(0, 0.1, 100)
    d = paired_diff(a, b, n_boot=2000)
    assert d.lo > 0.9 and d.hi < 1.1
    r = paired_diff(np.abs(a) + 10, np.abs(b) + 10, stat="ratio", n_boot=2000)
    assert r.lo <= r.value <= r.hi
    with pytest.raises(ValueError, match="equal length"):
        paired_diff([1.0, 2.0], [1.0])


def test_tost_declares_equivalence_only_inside_margin() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, 400)
    assert tost(x, x + rng.normal(0.0, 0.1, 400), margin=0.1).equivalent
    assert not tost(x + 0.5, x + rng.normal(0.0, 0.1, 400), margin=0.1).equivalent
    assert not tost(rng.normal(0, 1, 5), margin=0.01).equivalent
    with pytest.raises(ValueError):
        tost([1.0, 2.0], margin=0)


# ---------------------------------------------------------------- auroc and cluster_bootstrap (agent-credit §6.1)

from agentmill.core.stats import auroc, cluster_bootstrap  # noqa: E402


def test_auroc_hand_computed() -> None:
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 0.35 beats one, 0.8 beats both -> 3 of 4 pairs
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert auroc([1.0, 1.0, 1.0, 1.0], [0, 1, 0, 1]) == 0.5  # all ties count 1/2
    assert auroc([0.0, 1.0, 1.0], [0, 1, 0]) == 0.75  # one win, one tie
    assert auroc([3.0, 2.0, 1.0], [True, False, False]) == 1.0
    assert auroc([3.0, 2.0, 1.0], [False, True, True]) == 0.0


def test_auroc_matches_mann_whitney_u_with_ties() -> None:
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(0)
    for _ in range(20):
        s = rng.integers(0, 5, size=37).astype(float)
        y = rng.random(37) < 0.4
        if y.all() or not y.any():
            continue
        u = mannwhitneyu(s[y], s[~y]).statistic
        assert auroc(s, y) == pytest.approx(u / (y.sum() * (~y).sum()), abs=1e-12)


def test_auroc_rejects_one_class_and_nan() -> None:
    with pytest.raises(ValueError, match="both classes"):
        auroc([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="NaN"):
        auroc([0.1, np.nan], [0, 1])


def test_cluster_bootstrap_degenerate_and_drop_count() -> None:
    v = np.array([1.0, 1.0, 2.0, 2.0])
    e = cluster_bootstrap(lambda r: v[r].mean() - v[r].mean(), ["a", "a", "b", "b"], n_boot=50)
    assert (e.value, e.lo, e.hi, e.n) == (0.0, 0.0, 0.0, 2)
    # all positives in one cluster: resamples without it have no AUROC and are dropped, and that is recorded
    s = np.array([0.9, 0.8, 0.1, 0.2, 0.3, 0.4])
    y = np.array([1, 1, 0, 0, 0, 0], bool)
    e = cluster_bootstrap(lambda r: auroc(s[r], y[r]), [0, 0, 1, 1, 2, 2], n_boot=200, seed=1)
    assert e.value == 1.0 and "dropped=" in e.method and e.n == 3


def test_cluster_bootstrap_covers_where_the_row_bootstrap_does_not() -> None:
    """20 clusters of 10 rows sharing a cluster effect (ICC ≈ 0.9): the cluster interval covers the true mean near
    95 % of the time, the naive row bootstrap far less often."""
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(20), 10)
    hits_cluster = hits_rows = 0
    reps = 80
    for i in range(reps):
        x = np.repeat(rng.standard_normal(20) * 3.0, 10) + rng.standard_normal(200)
        e = cluster_bootstrap(lambda r: x[r].mean(), clusters, n_boot=400, seed=i)
        hits_cluster += e.lo <= 0.0 <= e.hi
        b = bootstrap_ci(x, n_boot=400, seed=i)
        hits_rows += b.lo <= 0.0 <= b.hi
    assert binomtest(hits_cluster, reps, 0.95).pvalue > 1e-3 and hits_cluster >= 0.85 * reps
    assert hits_rows < 0.6 * reps
