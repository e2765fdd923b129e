from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.methods.tree_rollouts import (collapse_probability, collapse_unbiased, expected_pool_collapse,
                                             fit_pool_mixture, group_stats, min_group_size, mixed_probability,
                                             pool_collapse_curve, predict_collapse, simulate_collapse,
                                             simulate_groups)

# reference values of C(G, p) = p^G + (1-p)^G [D]
TABLE = {0.01: (0.961, 0.923, 0.851, 0.725, 0.526, 0.276), 0.05: (0.815, 0.663, 0.440, 0.194, 0.038, 0.001),
         0.10: (0.656, 0.430, 0.185, 0.034, 0.001, 0.000), 0.30: (0.248, 0.058, 0.003, 0.000, 0.000, 0.000)}


@pytest.mark.parametrize("p", sorted(TABLE))
def test_closed_form_matches_spec_table(p) -> None:
    got = collapse_probability(p, np.array([4, 8, 16, 32, 64, 128]))
    assert np.allclose(np.round(got, 3), TABLE[p], atol=1e-9)


def test_closed_form_by_hand_and_edges() -> None:
    assert collapse_probability(0.5, 2) == 0.5  # HH or TT
    assert collapse_probability(0.0, 7) == collapse_probability(1.0, 7) == 1.0
    assert mixed_probability(0.5, 3) == 0.75
    assert collapse_probability(0.3, 1) == 1.0


def test_pool_closed_form_matches_spec_table() -> None:
    Gs = np.array([2, 4, 8, 16, 32, 64, 128, 256, 4096])
    want = (0.874, 0.771, 0.689, 0.625, 0.576, 0.540, 0.514, 0.496, 0.461)
    assert np.allclose(np.round(expected_pool_collapse(0.40, 0.05, 0.5, 2.0, Gs), 3), want)
    assert expected_pool_collapse(0.40, 0.05, 0.5, 2.0, 10**6) > 0.45  # never below the lake


def test_min_group_size_doubles_per_two_steps_of_hardness() -> None:
    # a rounded table gives 2, 3, 6, 12, 25 for H = 2..10 at q = 0.7, δ = 0.5; at H = 2, p = 0.49 and
    # C(2, 0.49) = 0.5002 > 0.5, so the exact minimum is 3 (tree_rollouts README deviation 4).
    assert [min_group_size(0.7**H, 0.5) for H in (2, 4, 6, 8, 10)] == [3, 3, 6, 12, 25]
    assert collapse_probability(0.49, 2) > 0.5 and collapse_probability(0.49, 3) <= 0.5
    assert min_group_size(0.0, 0.5) is None and min_group_size(1.0, 0.1) is None


def test_unbiased_estimator_by_hand() -> None:
    # 2 successes of 4: subsets of size 2 that agree are {s1,s2} and {f1,f2}: 2 of 6.
    assert collapse_unbiased(2, 4, 2) == pytest.approx(2 / 6)
    assert collapse_unbiased(0, 5, 3) == 1.0 and collapse_unbiased(1, 5, 5) == 0.0
    # its expectation over k ~ Binomial(N, p) is C(G, p)
    N, G, p = 10, 4, 0.3
    expect = sum(math.comb(N, k) * p**k * (1 - p) ** (N - k) * collapse_unbiased(k, N, G) for k in range(N + 1))
    assert expect == pytest.approx(collapse_probability(p, G))


@pytest.mark.parametrize("call,arg", [
    (lambda: collapse_probability(1.2, 4), "p"), (lambda: collapse_probability(0.2, 0), "G"),
    (lambda: collapse_unbiased(5, 4, 2), "k"), (lambda: collapse_unbiased(1, 4, 5), "G"),
    (lambda: min_group_size(0.2, 1.0), "delta"), (lambda: fit_pool_mixture([(1, 4)] * 7), "8 prompts"),
    (lambda: expected_pool_collapse(0.7, 0.5, 1, 1, 2), "z0"),
    (lambda: simulate_groups(0.5, 4, 0, np.random.default_rng(0)), "n"),
    (lambda: group_stats([1.0, float("nan")], [0, 0]), "NaN"), (lambda: group_stats([1.0], [0, 1]), "align"),
    (lambda: pool_collapse_curve([(3, 2)], [1]), "counts|0 <= k <= N"),
])
def test_bad_input_names_the_argument(call, arg) -> None:
    with pytest.raises(ValueError, match=arg):
        call()


@pytest.mark.parametrize("n", [2_000, 50_000])
def test_monte_carlo_agrees_within_4_se_and_tightens(n) -> None:
    rng = np.random.default_rng(7)
    for G, p in [(4, 0.1), (16, 0.05), (8, 0.5)]:
        c = collapse_probability(p, G)
        assert abs(simulate_collapse(p, G, n, rng) - c) <= 4 * math.sqrt(c * (1 - c) / n)


@pytest.mark.parametrize("n", [1_000, 20_000])
def test_simulated_groups_through_group_stats_follow_the_law(n) -> None:
    """End to end: explicit 0/1 groups -> trainer telemetry -> C(G,p), p^G and (1-p)^G within 4 SE (tightens
    with n, house style 8)."""
    rng = np.random.default_rng(5)
    for G, p in [(4, 0.1), (8, 0.5), (2, 0.9)]:
        summary = group_stats(simulate_groups(p, G, n, rng).ravel(), np.repeat(np.arange(n), G)).summary
        for key, want in [("collapse/rate", collapse_probability(p, G)), ("collapse/all_success", p**G),
                          ("collapse/all_fail", (1 - p) ** G)]:
            assert abs(summary[key] - want) <= 4 * math.sqrt(want * (1 - want) / n) + 1e-12, (G, p, key)


def test_group_stats_float32_noise_is_still_collapsed() -> None:
    # four fp32 rewards that "should" all be 0.8 but were computed different ways: std ~2.6e-8, not 0
    f = np.float32
    r = np.array([f(0.1) + f(0.7), f(0.8), f(0.4) * 2, f(0.9) - f(0.1)], dtype=np.float32).astype(float)
    assert 0 < np.std(r) < 1e-6
    st = group_stats(r, [0, 0, 0, 0])
    assert st.zero_std.tolist() == [True] and st.all_success.tolist() == [True]
    assert group_stats(r, [0, 0, 0, 0], zero_std_tol=0.0).zero_std.tolist() == [False]  # what `std == 0` gets


def test_group_stats_uses_a_tolerance_and_skips_unscorable() -> None:
    r = [1.0, 1.0 + 1e-9, 0.0, 1.0, None, 0.0, 0.0, 1.0]
    g = ["a", "a", "b", "b", "c", "c", "d", "d"]
    st = group_stats(r, g)
    assert st.zero_std.tolist() == [True, False, True, False]  # c has one scorable reward: no spread
    assert st.all_success.tolist() == [True, False, False, False]
    assert st.all_fail.tolist() == [False, False, True, False]
    assert st.summary["collapse/mixed_ratio"] == 0.5


def test_fit_recovers_a_known_mixture() -> None:
    rng = np.random.default_rng(11)
    n, N = 600, 32
    u = rng.random(n)
    p = np.where(u < 0.3, 0.0, np.where(u < 0.4, 1.0, rng.beta(2.0, 3.0, n)))
    counts = [(int(k), N) for k in rng.binomial(N, p)]
    fit = fit_pool_mixture(counts)
    assert fit.converged
    assert abs(fit.z0 - 0.3) < 0.06 and abs(fit.z1 - 0.1) < 0.05 and abs(fit.lake_mass - 0.4) < 0.06
    # the fitted prior's predicted collapse matches a fresh draw from the same pool
    pred = predict_collapse(fit, counts, 8).mean()
    fresh = np.mean([collapse_unbiased(int(k), N, 8) for k in rng.binomial(N, p)])
    assert abs(pred - fresh) < 0.03


def test_fit_on_coin_flips_finds_no_lake() -> None:
    rng = np.random.default_rng(2)
    fit = fit_pool_mixture([(int(k), 32) for k in rng.binomial(32, 0.5, 64)])
    assert fit.lake_mass < 0.02


def test_pool_curve_is_an_estimate_per_G() -> None:
    curve = pool_collapse_curve([(0, 8), (8, 8), (4, 8), (2, 8)], [1, 2, 8], n_boot=200)
    assert curve[1].value == 1.0 and curve[8].value == 0.5
    assert curve[2].lo <= curve[2].value <= curve[2].hi


def test_fit_on_a_flat_likelihood_reports_not_converged() -> None:
    # one sample per prompt: every mixture with the same mean fits equally well, so the lake is not identified
    fit = fit_pool_mixture([(0, 1), (1, 1)] * 5)
    assert fit.converged is False and math.isfinite(fit.loglik)
    assert fit.loglik == pytest.approx(10 * math.log(0.5))  # the maximum itself is known: mean pass rate 1/2
