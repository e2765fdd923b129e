"""e164.constraint_rot_instinct (CR-7): the soft/hard contrast on scripted rows small enough to check by hand, the
claims' wiring to prereg.yaml, the shared adapter recipe, and a smoke run of both organisms on the ``tiny:organism``
base the run builds itself, nothing injected (numbers meaningless; plumbing checked)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from agentmill.experiments import get
from agentmill.experiments.e164_constraint_rot.instinct import (CLAIM_METRICS, PRECONDITION_NOT_MET, _organism_metrics,
                                                                contrast_metrics, decay_stat, soft_hard)
from agentmill.experiments.protocol import RunContext

EXP_ID = "e164.constraint_rot_instinct"


def episode(family: str, kind: str, i: int, full: int, comps: tuple[int, ...], never: int = 1) -> list[dict[str, Any]]:
    """The rows of one episode: full_context, never_stated and one compacted row per compactor (c0, c1, …)."""
    base = {"family": family, "kind": kind, "episode_id": f"{family}-{i}", "pin": "none"}
    rows = [{**base, "condition": "full_context", "compactor": "none", "violation": bool(full)},
            {**base, "condition": "never_stated", "compactor": "none", "violation": bool(never)}]
    rows += [{**base, "condition": "compacted", "compactor": f"c{j}", "violation": bool(v)}
             for j, v in enumerate(comps)]
    return rows


def grid(soft: tuple[int, ...], hard: tuple[int, ...], n_fam: int = 4, n: int = 2) -> list[dict[str, Any]]:
    """``n_fam`` soft and ``n_fam`` hard families, ``n`` episodes each, every episode with the same compacted
    outcomes. The bootstrap resamples families of both kinds together, so a resample holds no hard family with
    probability (1/2)^(2·n_fam) (0.4 % for 4 + 4; D_hard is then undefined and counts as not positive)."""
    rows: list[dict[str, Any]] = []
    for f in range(n_fam):
        for kind, comps in (("soft", soft), ("hard", hard)):
            rows += [r for i in range(n) for r in episode(f"{kind[0]}{f}", kind, i, 0, comps)]
    return rows


def test_decay_pools_the_compactors_of_a_kind() -> None:
    # one soft episode: full 0, compactors 1, 1, 0 -> V(compacted) = 2/3; the hard episode is not counted
    rows = episode("s", "soft", 0, 0, (1, 1, 0)) + episode("h", "hard", 0, 0, (0, 0, 0))
    assert decay_stat("soft")(rows) == pytest.approx(2 / 3)
    assert decay_stat("hard")(rows) == 0.0
    # the full-context violation is subtracted
    assert decay_stat("soft")(episode("s", "soft", 0, 1, (1, 1, 0))) == pytest.approx(2 / 3 - 1)


def test_no_prior_shape_equal_decay_gives_ratio_one_and_zero_gap() -> None:
    """Both kinds: compactor c0 evicts (violation), c1 keeps the rule -> D_soft = D_hard = 1/2 in every resample."""
    sh = soft_hard(grid((1, 0), (1, 0)), B=200)
    assert sh["d_soft"].value == sh["d_hard"].value == 0.5
    assert (sh["diff"].value, sh["diff"].lo, sh["diff"].hi) == (0.0, 0.0, 0.0)
    assert sh["share_nonpositive"] < 0.05  # only resamples without a hard family (expected 0.4 %)
    assert (sh["ratio"].value, sh["ratio"].lo, sh["ratio"].hi) == (1.0, 1.0, 1.0)
    m = contrast_metrics("no_prior", sh)
    assert m["ratio_ci_includes_1_no_prior"].value == 1.0
    verdicts, reasons = get(EXP_ID).judge_with_reasons("quick", m)
    assert verdicts["CR-7a"] == "supported"  # the flag is judged exact
    # every resample gives the same gap: a zero-width interval is not certainty (issue 24), so the CI claim waits
    assert verdicts["CR-7b"] == "inconclusive" and reasons["CR-7b"].startswith("zero-width interval")
    assert verdicts["CR-7c"] == verdicts["CR-7d"] == "inconclusive"  # instinct metrics absent


def test_instinct_shape_soft_decays_twice_as_much() -> None:
    """Soft: both compactors lead to a violation (D = 1); hard: only c0 (D = 1/2) -> gap 0.5, ratio 2."""
    sh = soft_hard(grid((1, 1), (1, 0)), B=200)
    assert (sh["d_soft"].value, sh["d_hard"].value, sh["diff"].value) == (1.0, 0.5, 0.5)
    assert (sh["ratio"].value, sh["ratio"].lo, sh["ratio"].hi) == (2.0, 2.0, 2.0)
    m = contrast_metrics("instinct", sh)
    assert m["ratio_ci_includes_1_instinct"].value == 0.0
    verdicts, reasons = get(EXP_ID).judge_with_reasons("quick", m)
    assert verdicts["CR-7c"] == verdicts["CR-7d"] == "inconclusive"  # zero-width intervals (issue 24)
    assert reasons["CR-7c"].startswith("zero-width interval") and reasons["CR-7d"].startswith("zero-width interval")
    # the same shape read as the no-prior organism fails the flag outright; the gap's CI claim waits for an interval
    v2 = get(EXP_ID).judge("quick", contrast_metrics("no_prior", sh))
    assert v2["CR-7a"] == "not_supported" and v2["CR-7b"] == "inconclusive"


def test_small_gap_on_a_noiseless_grid_decides_nothing() -> None:
    """Soft D = 1/2, hard D = 1/4 (c0 of four compactors): gap 0.25 < 0.30 and ratio 2, the same in every resample.
    The old judge read the zero-width intervals as points (CR-7c not supported, CR-7d supported); now both wait."""
    sh = soft_hard(grid((1, 1, 0, 0), (1, 0, 0, 0)), B=200)
    assert sh["diff"].value == pytest.approx(0.25) and sh["ratio"].value == pytest.approx(2.0)
    m = contrast_metrics("instinct", sh)
    assert (m["diff_instinct"].hi, m["ratio_instinct"].lo) == pytest.approx((0.25, 2.0))
    # both intervals have zero width on this noiseless grid: neither claim is decided from a degenerate interval
    assert set(get(EXP_ID).judge("quick", m).values()) == {"inconclusive"}


def test_ratio_is_undefined_when_hard_decay_is_zero() -> None:
    sh = soft_hard(grid((1, 0), (0, 0)), B=100)
    assert sh["d_hard"].value == 0.0 and sh["ratio"] is None and sh["share_nonpositive"] == 1.0
    m = contrast_metrics("instinct", sh)
    assert "ratio_instinct" not in m and m["diff_instinct"].value == 0.5
    assert get(EXP_ID).judge("quick", m)["CR-7d"] == "inconclusive"


def test_ratio_is_undefined_when_resamples_often_lack_a_hard_family() -> None:
    """One soft and one hard family: D_hard = 1/2 on every resample that has the hard family, but a resample of two
    families misses it with probability 1/4 > 5 %, so the ratio is reported as undefined."""
    sh = soft_hard(grid((1, 0), (1, 0), n_fam=1), B=2000)
    assert sh["d_hard"].value == 0.5 and sh["ratio"] is None
    assert abs(sh["share_nonpositive"] - 0.25) < 0.03


def test_ratio_is_undefined_when_hard_decay_is_often_nonpositive_in_resamples() -> None:
    """Hard families with D = +1, +1, −1 (one episode each) next to two soft ones: the point D_hard = 1/3 > 0, but
    D_hard ≤ 0 (or undefined) on a resample of the five families whenever the negative family is drawn at least as
    often as the two positive ones together."""
    rows = episode("s1", "soft", 0, 0, (1,)) + episode("s2", "soft", 0, 0, (1,))
    rows += episode("h1", "hard", 0, 0, (1,)) + episode("h2", "hard", 0, 0, (1,)) + episode("h3", "hard", 0, 1, (0,))
    # multinomial(5; soft 2/5, positive hard 2/5, negative hard 1/5): P(#negative >= #positive)
    expected = sum(math.factorial(5) / (math.factorial(a) * math.factorial(b) * math.factorial(5 - a - b))
                   * (2 / 5) ** a * (1 / 5) ** b * (2 / 5) ** (5 - a - b)
                   for a in range(6) for b in range(6 - a) if b >= a)
    assert 0.3 < expected < 0.45
    sh = soft_hard(rows, B=2000)
    assert sh["d_hard"].value == pytest.approx(1 / 3)
    assert abs(sh["share_nonpositive"] - expected) < 0.03
    assert sh["ratio"] is None
    # a looser rule (share allowed up to 0.5) defines it: point 1 / (1/3) = 3
    loose = soft_hard(rows, B=2000, ratio_undefined_above=0.5)
    assert loose["ratio"].value == pytest.approx(3.0) and loose["ratio"].lo <= 3.0 <= loose["ratio"].hi


def test_soft_hard_needs_both_kinds() -> None:
    with pytest.raises(ValueError, match="both kinds"):
        soft_hard(episode("s", "soft", 0, 0, (1,)), B=10)


def test_failed_decay_precondition_withholds_the_contrast(tmp_path: Path) -> None:
    """never_stated = full_context = 0 everywhere: RS = 0, so the precondition fails and no claim metric is set."""
    from agentmill.methods.constraint_rot.prereg import load_prereg

    exp = get(EXP_ID)
    rows = []
    for fam, kind in (("s1", "soft"), ("h1", "hard")):
        rows += [r for i in range(3) for r in episode(fam, kind, i, 0, (1, 0), never=0)]
    ctx = RunContext("quick", "none", None, tmp_path, data={"instinct": {}})
    out: dict[str, Any] = {}
    stamped = _organism_metrics("instinct", rows, exp.setup_for("quick"), ctx, out, load_prereg(), 0.05, True)
    assert stamped == set() and out["rs_instinct"].value == 0.0
    assert ctx.data["instinct"]["soft_hard"] == PRECONDITION_NOT_MET
    assert ctx.data["instinct"]["precondition"].startswith(PRECONDITION_NOT_MET)
    assert not set(CLAIM_METRICS) & set(out)
    assert exp.judge("quick", out)["CR-7c"] == "inconclusive"


def test_claims_come_from_prereg_and_the_adapter_recipe_is_the_organism_experiments() -> None:
    from agentmill.experiments.e164_constraint_rot.instinct import organism_setup
    from agentmill.experiments.e164_constraint_rot.organism_profiles import recipe_of
    from agentmill.methods.constraint_rot.prereg import load_prereg

    exp, org, pr = get(EXP_ID), get("e164.constraint_rot_organism"), load_prereg()
    by_id = {c.id: c for c in exp.claims}
    assert set(by_id) == {"CR-7a", "CR-7b", "CR-7c", "CR-7d"}
    assert (by_id["CR-7b"].threshold, by_id["CR-7b"].upper) == (-pr.criterion("CR-7b").threshold,
                                                                 pr.criterion("CR-7b").threshold)
    assert by_id["CR-7c"].threshold == pr.criterion("CR-7c").threshold
    assert by_id["CR-7d"].threshold == by_id["CR-7d"].ci_bound == pr.criterion("CR-7d").threshold
    # smoke: the organism's smoke recipe; quick plans and full uses the organism experiment's *full* adapter
    for p, op in (("smoke", "smoke"), ("quick", "full"), ("full", "full")):
        mine, theirs = exp.setup_for(p), org.setup_for(op)
        assert recipe_of(organism_setup(mine)) == recipe_of(theirs)  # same address for the no-prior adapter
        assert recipe_of(organism_setup(mine), instinct=True) != recipe_of(theirs)
        assert mine.n_per_cell == theirs.n_per_cell  # the card's validation is reused
    q, f = exp.setup_for("quick"), exp.setup_for("full")
    assert q.plan_only and not f.plan_only and not exp.setup_for("smoke").plan_only
    assert (q.n_per_kind, f.n_per_kind) == (24, 24)
    assert f.styles == ("goal_extract", "handoff") and f.judged and not f.allow_unvalidated


@pytest.mark.slow
def test_smoke_runs_both_organisms_on_one_grid(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    exp = get(EXP_ID)
    s = exp.setup_for("smoke")
    ctx = RunContext("smoke", "none", None, tmp_path / "work")
    m = exp.measure(s, ctx)
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    assert not set(CLAIM_METRICS) & set(m)
    assert m["health_errors"].value == 0 and m["health_grader_mismatch"].value == 0
    assert ctx.data["compactors"] == ["window", "extractive", "structured", "llm_summary:goal_extract",
                                      "llm_summary:handoff"]
    for org in ("no_prior", "instinct"):
        info = ctx.data[org]
        assert {"G1", "G3", "G4", "G5", "G6"} <= {g["id"] for g in info["gates"]}
        assert set(info["v_compacted"]) == set(ctx.data["compactors"])
        sh = info["soft_hard"]  # allow_unvalidated: measured despite the random model, stamped
        assert isinstance(sh, dict) and sh["stamped"] is True
        assert f"diff_{org}_observed" in m and f"v_full_{org}" in m
        assert not math.isnan(m[f"rs_{org}"].value)
    assert ctx.data["instinct_adapter"]["key"] and ctx.data["adapter"]["key"]
    # both organisms read the same two LLM summaries per episode: the second one only hits the cache
    cache = ctx.data["summary_cache"]
    assert cache["writes"] == 2 * 2 * s.n_per_kind and cache["hits"] >= 2 * 2 * s.n_per_kind
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_quick_plans_both_organisms_without_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_only (the quick profile) on the smoke recipe: both organisms' SFT data and adapter addresses (the
    no-prior one the organism experiment's), no training, no summariser, no claim metric."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    import dataclasses

    import agentmill.methods.constraint_rot.organism.train as train
    from agentmill.lm import load_lm

    def refuse(*a: Any, **k: Any) -> None:  # planning must never train
        raise AssertionError("plan_only trained")
    monkeypatch.setattr(train, "train_organism", refuse)
    asked: list[str] = []

    def spy(spec: str) -> Any:
        asked.append(spec)
        return load_lm(spec)
    exp, org = get(EXP_ID), get("e164.constraint_rot_organism")
    s = dataclasses.replace(exp.setup_for("smoke"), plan_only=True)
    ctx = RunContext("smoke", "none", None, tmp_path / "work", lm_loader=spy)
    m = exp.measure(s, ctx)
    assert asked == []  # no summariser (the tiny base is built, not asked for)
    assert not set(CLAIM_METRICS) & set(m) and not any(k.endswith("_observed") for k in m)
    for tag in ("", "instinct_"):
        assert m[f"{tag}sft_examples"].value == s.n_train and m[f"{tag}adapter_cached"].value == 0
    assert ctx.data["adapter"]["key"] != ctx.data["instinct_adapter"]["key"]
    assert "no_prior" not in ctx.data and "instinct" not in ctx.data  # no grid, no validation
    assert set(exp.judge("quick", m).values()) == {"inconclusive"}
    octx = RunContext("smoke", "none", None, tmp_path / "org")
    org.measure(dataclasses.replace(org.setup_for("smoke"), plan_only=True), octx)
    assert ctx.data["adapter"]["key"] == octx.data["adapter"]["key"]  # the organism experiment's adapter
