"""e164.constraint_rot_crossing: the profiles' adapter address (the η² decomposition itself is tested in
tests/methods/constraint_rot/test_crossing.py), and (slow) the smoke run as the CLI runs it: the ``tiny:organism`` base
built into the work dir and the ``scripted:constant`` summariser (the organism experiment's smoke models). The tiny
model is untrained noise: what the smoke checks is the plumbing — identical inputs for every actor, one summary per
(episode, summariser), a complete V[s][a], and that an unvalidated organism withholds the claim ("precondition not
met")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentmill.experiments.e164_constraint_rot.crossing import ACTORS, CLAIM_METRICS, EXPERIMENT, slug
from agentmill.experiments.protocol import RunContext

EXP_ID = "e164.constraint_rot_crossing"


def get(exp_id: str):  # type: ignore[no-untyped-def]
    """The experiment by id without building the whole registry (other experiment modules stay out of this test)."""
    from agentmill.experiments.e164_constraint_rot import organism as organism

    return {EXP_ID: EXPERIMENT, organism.EXPERIMENT.id: organism.EXPERIMENT}[exp_id]


def test_slug_is_metric_safe() -> None:
    assert slug("llm_summary:goal_extract") == "llm_summary_goal_extract"
    assert slug("rule_reader:semantic") == "rule_reader_semantic"


# -- registration and profiles -------------------------------------------------------------------------------------
def test_profiles_share_the_organism_experiments_adapter_address() -> None:
    from agentmill.experiments.e164_constraint_rot.organism_profiles import recipe_of
    from agentmill.methods.constraint_rot.prereg import load_prereg

    exp, org = get(EXP_ID), get("e164.constraint_rot_organism")
    # smoke: the organism's smoke recipe; quick plans and full trains/uses the organism experiment's *full* adapter
    for p, op in (("smoke", "smoke"), ("quick", "full"), ("full", "full")):
        s, o = exp.setup_for(p), org.setup_for(op)
        assert recipe_of(s) == recipe_of(o), p  # type: ignore[arg-type]  # duck-typed: the recipe fields only
        assert s.n_per_cell == o.n_per_cell and s.shared_cache == o.shared_cache
    q, f = exp.setup_for("quick"), exp.setup_for("full")
    assert q.plan_only and not f.plan_only and not exp.setup_for("smoke").plan_only
    assert (q.n_episodes, f.n_episodes) == (24, 24) and len(f.styles) >= 2 and q.judged and f.judged
    assert q.summariser == f.summariser == "hf:smollm2"
    (claim,) = exp.claims
    k = load_prereg().criterion("CR-10a")
    assert (claim.id, claim.metric, claim.direction, claim.threshold) == ("CR-10a", "eta_margin", ">=", k.threshold)
    from agentmill.experiments import MODULES

    assert "agentmill.experiments.e164_constraint_rot.crossing" in MODULES


def test_too_few_llm_styles_is_an_error(tmp_path: Path) -> None:
    exp = get(EXP_ID)
    s = dataclasses.replace(exp.setup_for("smoke"), styles=("goal_extract",))
    with pytest.raises(ValueError, match="styles"):
        exp.measure(s, RunContext("smoke", "none", None, tmp_path))


# -- smoke run -----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_smoke_crossing_and_unvalidated_organism_withholds_the_claim(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    exp = get(EXP_ID)
    s = exp.setup_for("smoke")
    ctx = RunContext("smoke", "none", None, tmp_path / "work")
    m = exp.measure(s, ctx)
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    assert not set(CLAIM_METRICS) & set(m) and "eta_margin_observed" in m
    assert m["identical_inputs"].value == 1.0  # every actor read the same compacted context
    assert m["health_errors"].value == 0 and m["health_grader_mismatch"].value == 0
    # PF-6: one scripted summary per (episode, style), never per actor
    cache = ctx.data["summary_cache"]
    assert cache["summariser_calls"] == cache["misses"] == cache["writes"] == s.n_episodes * len(s.styles)
    assert cache["hits"] == (len(ACTORS) - 1) * s.n_episodes * len(s.styles) and cache["failed_summaries"] == 0
    cr = ctx.data["crossing"]
    assert len(cr["compactors"]) >= 4 and cr["actors"] == list(ACTORS)
    for c in cr["compactors"]:
        assert f"survival_{slug(c)}" in m
        for a in ACTORS:
            assert f"v_{slug(c)}__{slug(a)}" in m and m[f"v_{slug(c)}__{slug(a)}"].n == s.n_episodes
    assert "eta_margin_rulereaders" in m and "eta2_s" in m and "eta2_a" in m
    assert ctx.data["validation"]["trained_now"] is True
    assert len(exp.plots(ctx.data, tmp_path)) == 1

    # judged, same work dir: the cached adapter and its card's validation are reused; the random tiny organism
    # fails a gate, so the matrix is recorded but CR-10a is withheld (inconclusive), never judged
    ctx2 = RunContext("quick", "none", None, tmp_path / "work")
    m2 = exp.measure(dataclasses.replace(s, judged=True), ctx2)
    assert ctx2.data["validation"]["trained_now"] is False and ctx2.data["validation"]["reused"] is True
    assert ctx2.data["precondition"].startswith("precondition not met")
    assert m2["organism_validated"].value == 0.0 and "eta_margin" not in m2 and "eta_margin_observed" in m2
    verdicts, reasons = exp.judge_with_reasons("quick", m2, ctx2.data)  # the run's note says why
    assert verdicts == {"CR-10a": "inconclusive"} and reasons["CR-10a"] == ctx2.data["precondition"]
    assert ctx2.data["summary_cache"]["summariser_calls"] == 0  # every summary came from the cache


def test_quick_plans_the_organism_experiments_adapter_without_training(tmp_path: Path, monkeypatch) -> None:
    """plan_only (the quick profile) on the smoke recipe: the SFT data is built and the adapter addressed exactly as
    the organism experiment plans it, but nothing is trained, no summariser is loaded and no claim is measured."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    import agentmill.methods.constraint_rot.organism.train as train
    from agentmill.lm import load_lm

    def refuse(*a, **k):  # type: ignore[no-untyped-def]  # planning must never train
        raise AssertionError("plan_only trained")
    monkeypatch.setattr(train, "train_organism", refuse)
    asked: list[str] = []

    def loader(spec: str):  # type: ignore[no-untyped-def]
        asked.append(spec)
        return load_lm(spec)
    exp, org = get(EXP_ID), get("e164.constraint_rot_organism")
    s = dataclasses.replace(exp.setup_for("smoke"), plan_only=True)
    ctx = RunContext("smoke", "none", None, tmp_path / "work", lm_loader=loader)
    m = exp.measure(s, ctx)
    assert asked == []  # no summariser, no decoding (the tiny base is built, not asked for)
    assert not set(CLAIM_METRICS) & set(m) and not any(k.endswith("_observed") for k in m)
    assert m["sft_examples"].value == s.n_train and m["adapter_cached"].value == 0
    assert "--profile full" in ctx.data["plan_only"] and "crossing" not in ctx.data
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    assert exp.judge("quick", m) == {"CR-10a": "inconclusive"}
    # the very address the organism experiment plans (and its full profile trains) for the same recipe
    octx = RunContext("smoke", "none", None, tmp_path / "org")
    org.measure(dataclasses.replace(org.setup_for("smoke"), plan_only=True), octx)
    assert ctx.data["adapter"]["key"] == octx.data["adapter"]["key"]
