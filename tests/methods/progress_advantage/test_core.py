"""Array-level progress advantage: aggregations, ratio modes, best-of-N tie-breaking, AUROCs and failure
attribution on hand-checkable inputs (progress_advantage README)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import binomtest

from agentmill.methods.progress_advantage import (PAConfig, aggregate_steps, aggregate_tokens, attribute_failure,
                                                  attribution_metrics, best_of_n, step_error_auroc,
                                                  success_auroc)
from agentmill.methods.progress_advantage.core import candidate_step_score, step_score


def test_aggregate_tokens_by_hand():
    x = [1.0, -2.0, 3.0]
    assert [aggregate_tokens(x, h) for h in ("sum", "mean", "min", "max", "last")] == [2.0, 2 / 3, -2.0, 3.0, 3.0]
    assert math.isnan(aggregate_tokens([], "sum"))
    assert math.isnan(aggregate_tokens([1.0, np.nan], "max"))  # a truncated span is missing, not partial
    with pytest.raises(ValueError, match="token aggregation"):
        aggregate_tokens(x, "median")


def test_aggregate_steps_by_hand_skips_nan():
    x = [3.0, np.nan, -1.0, 2.0]
    assert aggregate_steps(x, "sum") == 4.0 and aggregate_steps(x, "mean") == 4 / 3
    assert aggregate_steps(x, "last") == 2.0 and aggregate_steps(x, "min") == -1.0
    twelve = np.arange(12.0)  # ceil(0.1 * 12) = 2 lowest: 0 and 1
    assert aggregate_steps(twelve, "bottom10") == 0.5
    assert aggregate_steps([5.0, 1.0], "bottom10") == 1.0
    assert math.isnan(aggregate_steps([np.nan, np.nan], "sum"))


def test_ratio_modes_agree_on_sum_mean_last_and_differ_on_min_max():
    p, r = np.array([-1.0, -3.0]), np.array([-4.0, -2.0])  # per-token ratios: [3, -1]
    for how in ("sum", "mean", "last"):
        assert step_score(p, r, token_agg=how) == pytest.approx(step_score(p, r, token_agg=how,
                                                                           ratio_mode="separate"))
    assert step_score(p, r, token_agg="min") == -1.0
    assert step_score(p, r, token_agg="min", ratio_mode="separate") == 1.0  # min(p) - min(r) = -3 + 4
    assert step_score(p, r, token_agg="max") == 3.0
    assert step_score(p, r, token_agg="max", ratio_mode="separate") == 1.0  # -1 + 2
    assert step_score(p, r, beta=0.5) == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        step_score(p, r[:1])


def test_candidate_step_score_by_hand():
    # policy: softmax([0, log 3]) = [1/4, 3/4]; reference uniform [1/2, 1/2]
    assert candidate_step_score(np.array([0.0, math.log(3)]), np.zeros(2), 1) == pytest.approx(math.log(1.5))
    # a per-state constant added to every candidate's likelihood changes nothing (the free-text score would shift)
    assert candidate_step_score(np.array([5.0, 5 + math.log(3)]), np.array([-2.0, -2.0]), 1, beta=2.0) == \
        pytest.approx(2 * math.log(1.5))
    assert math.isnan(candidate_step_score(np.array([0.0, np.nan]), np.zeros(2), 0))


def test_config_validates():
    with pytest.raises(ValueError, match="beta"):
        PAConfig(beta=0.0)
    with pytest.raises(ValueError, match="step_agg"):
        PAConfig(step_agg="median")
    with pytest.raises(ValueError, match="allow_cross_tokenizer"):
        PAConfig(token_agg="mean", allow_cross_tokenizer=True)
    with pytest.raises(ValueError, match="candidates"):
        PAConfig(action_space="candidates", token_agg="min")


# ---------------------------------------------------------------- best-of-N


def test_best_of_n_by_hand_with_nan_and_exclusion():
    scores = {"t1": [0.1, 0.9, 0.5], "t2": [np.nan, -1.0, -2.0], "t3": [np.nan, np.nan]}
    succ = {"t1": [0, 1, 0], "t2": [1, 0, 1], "t3": [1, 1]}
    r = best_of_n(scores, succ)
    assert r.picks == {"t1": 1, "t2": 1} and r.n_excluded_tasks == 1 and r.n_ties == 0
    assert r.success == 0.5 and r.pass_at_1 == pytest.approx((1 / 3 + 2 / 3) / 2) and r.pass_at_n == 1.0


def test_best_of_n_ties_are_seeded_order_free_and_uniform():
    scores = {f"t{i}": [1.0, 1.0, 0.0, 1.0] for i in range(300)}
    succ = {k: [1, 0, 0, 0] for k in scores}
    r = best_of_n(scores, succ, seed=7)
    assert r.n_ties == 300 and set(r.picks.values()) == {0, 1, 3}
    rev = best_of_n(dict(reversed(list(scores.items()))), succ, seed=7)
    assert rev.picks == r.picks  # a task's pick does not depend on the other tasks or their order
    assert best_of_n(scores, succ, seed=8).picks != r.picks
    k = sum(p == 0 for p in r.picks.values())  # each tied index is chosen with probability 1/3
    assert binomtest(k, 300, 1 / 3).pvalue > 1e-3


# ---------------------------------------------------------------- AUROCs


def test_step_error_auroc_by_hand():
    A = [np.array([1.0, -1.0, 0.2]), np.array([0.5, -2.0])]
    lab = [np.array([1, 0, -1]), np.array([1, 0])]
    r = step_error_auroc(A, lab, n_boot=200)
    assert r.estimate.value == 1.0 and r.n_steps == 4 and r.n_errors == 2 and r.n_unknown_label == 1
    # ties count 1/2: an error step scored like a progress step
    r = step_error_auroc([np.array([0.0, 0.0]), np.array([1.0, -1.0])], [np.array([1, 0]), np.array([1, 0])],
                         n_boot=200)
    assert r.estimate.value == pytest.approx((1 + 0.5 + 1 + 1) / 4)
    flat = step_error_auroc(np.array([1.0, -1.0, np.nan]), np.array([1, 0, 0]), traj=np.array([0, 0, 1]),
                            n_boot=50)
    assert flat.n_missing_score == 1 and flat.estimate.value == 1.0
    with pytest.raises(ValueError, match="both error and progress"):
        step_error_auroc([np.array([1.0])], [np.array([1])])


def test_step_error_auroc_permuted_labels_control():
    """Negative control [R]: labels independent of scores give a CI around 0.5; a real signal excludes it."""
    rng = np.random.default_rng(0)
    A = [rng.standard_normal(10) for _ in range(60)]
    lab = [rng.integers(0, 2, 10) for _ in range(60)]
    r = step_error_auroc(A, lab, n_boot=300)
    assert r.estimate.lo < 0.5 < r.estimate.hi
    signal = [a + 1.5 * (2 * lb - 1) for a, lb in zip(A, lab)]
    assert step_error_auroc(signal, lab, n_boot=300).estimate.lo > 0.75


def test_return_spearman():
    from agentmill.methods.progress_advantage.core import return_spearman

    est, n_excl = return_spearman([1.0, 2.0, np.nan, 3.0, 4.0], [0.0, 0.5, 9.0, 0.7, 2.0], n_boot=200)
    assert est.value == pytest.approx(1.0) and n_excl == 1
    rng = np.random.default_rng(1)
    est, _ = return_spearman(rng.standard_normal(200), rng.standard_normal(200), n_boot=300)
    assert est.lo < 0 < est.hi


def test_success_auroc_excludes_nan():
    est, n_excl = success_auroc([0.9, 0.1, np.nan, 0.5], [1, 0, 1, 0], n_boot=100)
    assert est.value == 1.0 and n_excl == 1


# ---------------------------------------------------------------- failure attribution


def test_attribution_by_hand():
    A = [0.5, -0.2, -1.0, 0.8, -0.1]  # running sums 0.5, 0.3, -0.7, 0.1, 0.0
    assert attribute_failure(A, "min_cumulative") == (2, False)
    assert attribute_failure(A, "sharpest_drop") == (2, False)
    assert attribute_failure(A, "sharpest_abs_drop") == (4, False)  # 0.8 -> -0.1 is the largest fall (-0.9)
    assert attribute_failure([0.5, -0.5, 0.5, -0.5], "sharpest_abs_drop") == (1, False)  # tied falls: the earliest
    # fallbacks: nothing negative / no fall / no scored step
    assert attribute_failure([0.3, 0.1, 0.2], "sharpest_drop") == (0, True)
    assert attribute_failure([0.1, 0.2, 0.3], "sharpest_abs_drop") == (0, True)
    assert attribute_failure([0.1], "sharpest_abs_drop") == (0, True)
    assert attribute_failure([np.nan, np.nan], "min_cumulative") == (0, True)
    # NaN steps are never blamed and add nothing to running sums; first valid step is the fallback
    assert attribute_failure([np.nan, 0.2, 0.4], "sharpest_drop") == (1, True)
    assert attribute_failure([np.nan, 1.0, -3.0], "min_cumulative") == (2, False)
    # ties go to the earliest step
    assert attribute_failure([-1.0, 1.0, -1.0], "sharpest_drop") == (0, False)


def test_attribution_metrics_and_fallback_warning():
    m = attribution_metrics([[0.5, -1.0, 0.2], [0.1, 0.2, -0.5]], [1, 1], "sharpest_drop")
    assert (m.accuracy, m.mae, m.fallback_rate, m.n) == (0.5, 0.5, 0.0, 2)
    with pytest.warns(UserWarning, match="fallback rate"):
        attribution_metrics([[0.1, 0.2], [0.3, 0.4]], [0, 1], "sharpest_drop")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attribution_metrics([[0.5, -1.0]], [1], "sharpest_drop")
