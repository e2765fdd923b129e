"""The judge's edge cases (issue 24): what it does with no number, no interval, a degenerate interval, an interval
built from a few surviving bootstrap resamples, and with a claim the run deliberately withheld. Each case is one the
old judge got wrong (a NaN interval read as ``not_supported``, a zero-width one silently read as a point) or one a
run depends on (``not_judged`` with its reason, the reasons kept in the record)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from agentmill.core.records import RunRecord
from agentmill.core.stats import Estimate, cluster_bootstrap, paired_diff, paired_rate_ratio, percentile_estimate
from agentmill.experiments.protocol import (NOT_JUDGED_KEY, SMOKE_REASON, Claim, Experiment, RunContext, rule_counts,
                                            unjudged, withhold)

NAN = math.nan


def claim(direction=">=", threshold=1.0, *, upper=None, judge_on="ci", ci_bound=None, exact_why="", metric="m"):
    if judge_on == "exact" and not exact_why:
        exact_why = "a count over a fixed battery"
    return Claim(id=f"C-{metric}", statement="s", source="src", paper_value="p", metric=metric, direction=direction,
                 threshold=threshold, upper=upper, judge_on=judge_on, ci_bound=ci_bound, exact_why=exact_why)


# -- no number ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("judge_on", ["ci", "exact"])
def test_nan_or_infinite_point_is_inconclusive_under_every_rule(judge_on) -> None:
    c = claim(judge_on=judge_on)
    assert c.judge_with_reason(Estimate(NAN, NAN, NAN, n=10)) == ("inconclusive", "m is undefined (NaN)")
    assert c.judge_with_reason(Estimate(math.inf, math.inf, math.inf, n=10)) == ("inconclusive", "m is infinite")
    assert c.judge_with_reason(None) == ("inconclusive", "m was not recorded")


def test_nan_bound_with_a_finite_point_is_inconclusive_not_a_refutation() -> None:
    """The old judge compared NaN bounds and called a ">=" claim not supported."""
    for direction in (">=", "<="):
        v, why = claim(direction, 0.5).judge_with_reason(Estimate(0.9, NAN, NAN, n=10, method="cluster_bootstrap"))
        assert v == "inconclusive" and "no interval" in why and "cluster_bootstrap" in why
    v, _ = claim(direction=">=", threshold=0.5, ci_bound=0.0).judge_with_reason(Estimate(0.9, 0.2, NAN, n=10))
    assert v == "inconclusive"


# -- no interval ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,why", [(0, "0 independent units: no interval"), (1, "1 independent unit: no interval")])
def test_fewer_than_two_independent_units_is_no_interval(n, why) -> None:
    est = Estimate(2.0, 1.5, 2.5, n=n, method="bootstrap")  # a wide "interval" that rests on nothing
    assert claim(">=", 1.0).judge_with_reason(est) == ("inconclusive", why)
    assert claim(">=", 1.0, ci_bound=1.0).judge_with_reason(est) == ("inconclusive", why)


def test_one_seed_gives_no_interval_however_good_the_point() -> None:
    """E163-R5d/f/g at quick: one seed, a bootstrap of one value, used to come out supported."""
    from agentmill.core.stats import bootstrap_ci

    est = bootstrap_ci([1.01])
    assert (est.n, est.lo, est.hi) == (1, 1.01, 1.01)
    assert claim("<=", 1.3).judge_with_reason(est) == ("inconclusive", "1 independent unit: no interval")


def test_zero_width_sampled_interval_is_not_read_as_a_point() -> None:
    """A bootstrap of 30 identical units (every prompt gave 0 mismatches) is not certainty; nor is an exact number
    under a CI rule. Both are inconclusive, with different reasons."""
    same = Estimate(0.0, 0.0, 0.0, n=30, method="bootstrap")
    v, why = claim("<=", 0.0).judge_with_reason(same)
    assert v == "inconclusive" and why.startswith("zero-width interval: all 30 units agree (bootstrap)")
    v, why = claim("<=", 0.0).judge_with_reason(Estimate.exact(0.0, n=30))
    assert v == "inconclusive" and "an exact number, but the claim is judged on an interval" in why
    assert claim("<=", 0.0, judge_on="exact").judge(Estimate.exact(0.0, n=30)) == "supported"


def test_a_count_over_zero_prompts_is_never_supported() -> None:
    """E162-NC4 with 0 prompts: the experiment records NaN, and a CI-judged count with n = 0 has no interval."""
    assert claim("<=", 0, judge_on="exact").judge(Estimate.exact(NAN, n=0)) == "inconclusive"
    assert claim("<=", 0).judge(Estimate.exact(0.0, n=0)) == "inconclusive"


# -- dropped resamples ----------------------------------------------------------------------------------------------
def test_more_than_half_the_resamples_dropped_is_inconclusive_half_is_not() -> None:
    boots = np.r_[np.full(600, NAN), np.linspace(1.2, 1.8, 400)]
    est = percentile_estimate(1.5, boots, n=12)
    assert (est.dropped, est.n_boot) == (600, 1000) and est.method == "cluster_bootstrap(dropped=600)"
    v, why = claim(">=", 1.0).judge_with_reason(est)
    assert v == "inconclusive" and why.startswith("600 of 1000 bootstrap resamples undefined")
    half = percentile_estimate(1.5, np.r_[np.full(500, NAN), np.linspace(1.2, 1.8, 500)], n=12)
    assert half.dropped == 500 and claim(">=", 1.0).judge(half) == "supported"


def test_every_bootstrap_in_stats_records_its_resamples_and_units() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random(20) + 1, rng.random(20) + 1
    d = paired_diff(x, y, n_boot=300)
    assert (d.n, d.n_boot, d.dropped) == (20, 300, 0)
    r = paired_diff(x, np.r_[0.0, np.zeros(19)] + (np.arange(20) == 3), stat="ratio", n_boot=400)
    assert r.n == 20 and r.n_boot == 400 and 0 < r.dropped < 400  # resamples that miss unit 3 have mean(b) = 0
    rr = paired_rate_ratio(x, np.ones(20), (np.arange(20) == 0).astype(float), np.ones(20), n_boot=500)
    assert rr.n == 20 and rr.n_boot == 500 and rr.dropped > 0  # resamples without unit 0: reference rate 0
    positive = np.arange(40) < 20  # cluster 0 all positive, cluster 1 all negative

    def share_if_both_classes(rows: np.ndarray) -> float:
        picked = positive[rows]
        return float(picked.mean()) if 0 < picked.sum() < picked.size else NAN

    cb = cluster_bootstrap(share_if_both_classes, np.arange(40) // 20, n_boot=200)  # half the resamples: one class
    assert cb.n == 2 and cb.n_boot == 200 and 50 < cb.dropped < 150


# -- the three rules ------------------------------------------------------------------------------------------------
def test_exact_claims_must_say_why_and_cannot_take_a_ci_bound() -> None:
    with pytest.raises(ValueError, match="exact_why"):
        Claim("X", "s", "src", "p", "m", ">=", 1.0, judge_on="exact")
    with pytest.raises(ValueError, match="exact_why"):
        Claim("X", "s", "src", "p", "m", ">=", 1.0, judge_on="exact", exact_why="   ")
    with pytest.raises(ValueError, match="ci_bound"):
        Claim("X", "s", "src", "p", "m", ">=", 1.0, judge_on="exact", exact_why="closed form", ci_bound=0.5)
    with pytest.raises(ValueError, match="exact_why is for"):
        Claim("X", "s", "src", "p", "m", ">=", 1.0, exact_why="a CI claim has no business saying this")
    with pytest.raises(ValueError, match="'ci' or 'exact'"):
        Claim("X", "s", "src", "p", "m", ">=", 1.0, judge_on="point")  # type: ignore[arg-type]
    assert claim(judge_on="exact").rule == "exact" and claim().rule == "ci" and claim(ci_bound=0.5).rule == "two_part"


def test_exact_rule_judges_the_point_whatever_the_interval() -> None:
    c = claim("<=", 0.0, judge_on="exact")
    assert c.judge_with_reason(Estimate(0.0, -5.0, 5.0)) == ("supported", "")
    assert c.judge_with_reason(Estimate.exact(1.0)) == ("not_supported", "")


def test_two_part_rule_every_branch_with_its_reason() -> None:
    ge = claim(">=", 1.5, ci_bound=1.0)
    assert ge.judge_with_reason(Estimate(1.6, 1.1, 2.0, n=8)) == ("supported", "")
    v, why = ge.judge_with_reason(Estimate(1.6, 0.9, 2.0, n=8))
    assert v == "inconclusive" and "meets the threshold" in why and "not > 1" in why
    v, why = ge.judge_with_reason(Estimate(1.2, 1.05, 1.6, n=8))
    assert v == "inconclusive" and "misses the threshold" in why
    assert ge.judge_with_reason(Estimate(1.2, 1.05, 1.4, n=8)) == ("not_supported", "")
    le = claim("<=", 0.8, ci_bound=1.0)
    assert le.judge(Estimate(0.7, 0.6, 0.95, n=8)) == "supported"
    assert le.judge(Estimate(0.7, 0.6, 1.05, n=8)) == "inconclusive"  # near (upper) end not < 1
    assert le.judge(Estimate(0.9, 0.85, 0.95, n=8)) == "not_supported"  # far (lower) end misses 0.8 too


def test_in_claims_need_the_whole_interval_inside_and_refute_only_wholly_outside() -> None:
    c = claim("in", 0.45, upper=0.55)
    assert c.judge(Estimate(0.5, 0.46, 0.54, n=50)) == "supported"
    v, why = c.judge_with_reason(Estimate(0.5, 0.40, 0.54, n=50))
    assert v == "inconclusive" and why == "CI [0.4, 0.54] straddles ∈ [0.45, 0.55]"
    assert c.judge(Estimate(0.7, 0.6, 0.8, n=50)) == "not_supported"
    assert c.judge(Estimate(0.3, 0.2, 0.4, n=50)) == "not_supported"
    exact_in = claim("in", 0.7, upper=0.7, judge_on="exact")
    assert exact_in.judge(Estimate.exact(0.7)) == "supported" and exact_in.judge(Estimate.exact(0.71)) == "not_supported"


def test_rule_counts_counts_each_rule_over_experiments_or_a_registry() -> None:
    exp = _exp(claim(metric="a"), claim(metric="b", ci_bound=0.0), claim(metric="c", judge_on="exact"),
               claim(metric="d", judge_on="exact"))
    assert rule_counts([exp]) == {"ci": 1, "exact": 2, "two_part": 1}
    assert rule_counts({exp.id: exp, "other": _exp(claim(metric="e"))}) == {"ci": 2, "exact": 2, "two_part": 1}
    assert rule_counts([]) == {"ci": 0, "exact": 0, "two_part": 0}


def test_every_registered_exact_claim_says_why() -> None:
    from agentmill.experiments import registry

    reg = registry()
    counts = rule_counts(reg)
    assert sum(counts.values()) == sum(len(e.claims) for e in reg.values()) and counts["exact"] > 0
    for exp in reg.values():
        for c in exp.claims:
            assert (c.rule == "exact") == bool(c.exact_why.strip()), (exp.id, c.id)


# -- not judged -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _S:
    n: int = 1


def _exp(*claims: Claim) -> Experiment:
    return Experiment("t.x", "t", "p", claims, {p: _S() for p in ("smoke", "quick", "full")},
                      lambda s, ctx: {}, "note")


def test_unjudged_renames_and_keeps_the_reason_where_the_judge_finds_it(tmp_path) -> None:
    exp = _exp(claim(metric="a"), claim(metric="b"))
    ctx = RunContext(profile="quick", model="m", executor=None, work_dir=tmp_path)
    good = Estimate(2.0, 1.5, 2.5, n=10)
    out = unjudged({"a": good, "b": good, "other": good}, ("a",), "tiny stand-in model: verdicts need full", ctx.data)
    assert set(out) == {"a_observed", "b", "other"}
    assert ctx.data[NOT_JUDGED_KEY] == {"a": "tiny stand-in model: verdicts need full"}
    verdicts, reasons = exp.judge_with_reasons("quick", out, ctx.data)
    assert verdicts == {"C-a": "not_judged", "C-b": "supported"}
    assert reasons == {"C-a": "tiny stand-in model: verdicts need full"}
    assert exp.judge("quick", out, ctx.data) == verdicts
    with pytest.raises(ValueError, match="reason"):
        unjudged(out, ("b",), " ", ctx.data)


def test_a_withheld_metric_without_a_number_is_not_judged_and_an_observed_one_without_a_note_too() -> None:
    exp = _exp(claim(metric="a"), claim(metric="b"), claim(metric="c"))
    data: dict = {}
    withhold(data, ("a",), "1 seed per cell: the full rule needs 5 seeds")
    verdicts, reasons = exp.judge_with_reasons("quick", {"b_observed": Estimate.exact(1.0)}, data)
    assert verdicts == {"C-a": "not_judged", "C-b": "not_judged", "C-c": "inconclusive"}
    assert reasons["C-a"] == "1 seed per cell: the full rule needs 5 seeds"
    assert reasons["C-b"] == "recorded as observed only: verdict withheld"  # a hand-made *_observed (old records)
    assert reasons["C-c"] == "c was not recorded"


def test_plan_only_runs_and_the_smoke_profile_are_not_judged_with_their_reason() -> None:
    exp = _exp(claim(metric="a"), claim(metric="b", judge_on="exact"))
    metrics = {"b": Estimate.exact(5.0)}
    plan = {"plan_only": "quick plans only: nothing trained"}
    assert exp.judge_with_reasons("quick", metrics, plan) == (
        {"C-a": "not_judged", "C-b": "not_judged"},
        {"C-a": "plan only: quick plans only: nothing trained", "C-b": "plan only: quick plans only: nothing trained"})
    verdicts, reasons = exp.judge_with_reasons("smoke", metrics, {})
    assert set(verdicts.values()) == {"not_judged"} and set(reasons.values()) == {SMOKE_REASON}


def test_a_failed_precondition_is_inconclusive_with_its_note_not_a_deliberate_not_judged() -> None:
    exp = _exp(claim(metric="a"), claim(metric="b"))
    data = {"precondition": "precondition not met: organism failed gate(s) ['G2']"}
    out = unjudged({"a": Estimate(2.0, 1.5, 2.5, n=10)}, ("a",), data["precondition"], data)
    verdicts, reasons = exp.judge_with_reasons("full", out, data)
    assert verdicts == {"C-a": "inconclusive", "C-b": "inconclusive"}
    assert reasons == {"C-a": data["precondition"], "C-b": data["precondition"]}


# -- records --------------------------------------------------------------------------------------------------------
def test_record_round_trip_keeps_reasons_and_the_bootstrap_counts(tmp_path) -> None:
    est = Estimate(1.5, 1.1, 1.9, n=12, method="cluster_bootstrap(dropped=7)", dropped=7, n_boot=200)
    rec = RunRecord(experiment_id="t.x", profile="quick", setup={}, metrics={"m": est},
                    verdicts={"C-1": "inconclusive", "C-2": "supported"}, reasons={"C-1": "1 independent unit"})
    back = RunRecord.read(rec.write(tmp_path / "r.json"))
    assert back.reasons == {"C-1": "1 independent unit"} and back.metrics["m"] == est
    assert Estimate.from_dict(est.to_dict()) == est


def test_an_old_record_without_the_new_fields_still_reads(tmp_path) -> None:
    old = {"experiment_id": "t.x", "profile": "quick", "setup": {}, "schema": 1,
           "metrics": {"m": {"value": 1.0, "lo": 0.5, "hi": 1.5, "n": 3, "level": 0.95,
                             "method": "cluster_bootstrap(dropped=2)"}},
           "verdicts": {"C-1": "supported"}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    rec = RunRecord.read(path)
    assert rec.reasons == {} and (rec.metrics["m"].dropped, rec.metrics["m"].n_boot) == (0, 0)
    assert Estimate.from_dict({**old["metrics"]["m"], "added_later": 1}).n == 3  # a newer field is ignored


def test_bad_reasons_or_counts_in_a_record_are_named() -> None:
    from agentmill.core.records import RecordError

    base = {"experiment_id": "t.x", "profile": "quick", "setup": {}}
    with pytest.raises(RecordError, match="reasons"):
        RunRecord.from_dict({**base, "reasons": {"C-1": 3}})
    with pytest.raises(RecordError, match=r"dropped"):
        RunRecord.from_dict({**base, "metrics": {"m": {"value": 1, "lo": 1, "hi": 1, "dropped": -1}}})
    with pytest.raises(RecordError, match=r"dropped <= n_boot"):
        RunRecord.from_dict({**base, "metrics": {"m": {"value": 1, "lo": 1, "hi": 1, "dropped": 5, "n_boot": 2}}})
