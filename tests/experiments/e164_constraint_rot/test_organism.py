"""e164.constraint_rot_organism at the smoke profile, without SmolLM2 and with nothing injected (as the CLI runs it):
the ``tiny:organism`` base the run builds into its work dir and ``scripted:constant`` summarising. The tiny model is
untrained noise, so the numbers mean nothing; what is checked is the plumbing: the adapter is trained once into a
content-addressed directory and reused, the gates are recorded, the grid covers every condition × compactor,
LLM summaries go through the cache, unjudged metrics are renamed, and a failed gate withholds every later claim."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from agentmill.experiments import get  # noqa: E402
from agentmill.experiments.e164_constraint_rot.organism import CLAIM_METRICS  # noqa: E402
from agentmill.experiments.protocol import RunContext  # noqa: E402
from agentmill.methods.constraint_rot.organism.cache import adapter_key  # noqa: E402

EXP_ID = "e164.constraint_rot_organism"


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext("smoke", "none", None, tmp_path / "work")


@pytest.mark.slow
def test_smoke_runs_the_whole_grid_and_reuses_the_adapter(tmp_path: Path) -> None:
    exp = get(EXP_ID)
    s = exp.setup_for("smoke")
    ctx = _ctx(tmp_path)
    m = exp.measure(s, ctx)
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    # judged=False: every claim metric that was measured carries the _observed suffix, none its claim name
    assert not set(CLAIM_METRICS) & set(m)
    for name in ("gate_g1", "gate_g5", "nc4_v_irrelevant", "nc5_over_refusal", "nc7_pinned_minus_full",
                 "nc8_decay_ci_includes_0", "nc3_precondition_not_met", "card_share_le_60"):
        assert f"{name}_observed" in m, name
    assert m["health_errors"].value == 0 and m["health_grader_mismatch"].value == 0
    grid = ctx.data["grid"]
    assert set(grid) == {"window", "extractive", "structured", "llm_summary:goal_extract", "llm_summary:handoff"}
    assert all(grid[n]["compacted"] is not None and grid[n]["pinned:after_summary"] is not None for n in grid)
    # compacted/cf_keep/cf_drop/pinned × 2 styles × 4 episodes: cf edits re-read compacted's summaries from the cache
    cache = ctx.data["summary_cache"]
    assert cache["writes"] + cache["hits"] == 4 * 2 * s.n_episodes and cache["hits"] >= 2 * 2 * s.n_episodes
    assert ctx.data["validation"]["trained_now"] is True
    assert {g["id"] for g in ctx.data["validation"]["gates"]} == {"G1", "G2", "G3", "G4", "G5", "G6"}
    assert "todo" not in ctx.data
    assert len(exp.plots(ctx.data, tmp_path)) == 2
    # second run: the same data + hyperparameters find the cached, already validated adapter
    ctx2 = _ctx(tmp_path)
    exp.measure(s, ctx2)
    assert ctx2.data["validation"]["trained_now"] is False
    assert ctx2.data["adapter"]["key"] == ctx.data["adapter"]["key"]
    assert len(list((tmp_path / "work" / "organisms").iterdir())) == 1


@pytest.mark.slow
def test_failed_gates_withhold_every_later_claim(tmp_path: Path) -> None:
    """judged + not validated + no allow_unvalidated: the gate metrics keep their names (so CR-2 is judged and
    fails), no grid is run and every later claim has no metric ("precondition not met", inconclusive)."""
    exp = get(EXP_ID)
    s = dataclasses.replace(exp.setup_for("smoke"), judged=True, allow_unvalidated=False)
    ctx = _ctx(tmp_path)
    m = exp.measure(s, ctx)
    assert ctx.data["precondition"].startswith("precondition not met")   # random tiny model: fails a gate
    assert "grid" not in ctx.data
    verdicts = exp.judge("quick", m)
    assert "not_supported" in {verdicts[g] for g in ("G1", "G2", "G3", "G4", "G5", "G6")}
    later = [c.id for c in exp.claims if not c.metric.startswith(("gate_", "nc4_", "nc5_"))]
    assert later and all(verdicts[c] == "inconclusive" for c in later)


def test_adapter_key_is_content_addressed() -> None:
    k = adapter_key("m" * 64, {"lr": 3e-4}, "hf:smollm2")
    assert len(k) == 16 and k == adapter_key("m" * 64, {"lr": 3e-4}, "hf:smollm2")
    assert k != adapter_key("n" * 64, {"lr": 3e-4}, "hf:smollm2")
    assert k != adapter_key("m" * 64, {"lr": 1e-4}, "hf:smollm2")
    assert k != adapter_key("m" * 64, {"lr": 3e-4}, "tiny:organism")


def test_claims_come_from_prereg_and_profiles_follow_the_spec() -> None:
    from agentmill.methods.constraint_rot.prereg import load_prereg

    exp, pr = get(EXP_ID), load_prereg()
    for c in exp.claims:
        if c.id in ("NC-3a", "NC-8a", "CR-3c", "CR-4d"):
            continue  # ci_includes / ci_lower_gt / ci_excludes encoded by hand
        k = pr.criterion(c.id)
        assert c.threshold in (k.threshold, -k.threshold), (c.id, c.threshold, k.threshold)
    # full runs the spec's quick organism (quick only plans it); the Setup defaults keep the spec's full sizes
    q, f, spec_full = exp.setup_for("quick"), exp.setup_for("full"), type(exp.setup_for("full"))()
    assert (f.n_train, f.n_episodes, f.n_per_cell) == (320, 24, 60) and f.styles == ("goal_extract", "handoff")
    assert (spec_full.n_train, spec_full.n_episodes) == (960, 96) and spec_full.n_per_cell >= 150
    assert q.plan_only and q.n_train == f.n_train
    assert f.judged and not f.allow_unvalidated and not f.plan_only


def test_non_hf_base_needs_a_loader(tmp_path: Path) -> None:
    from agentmill.experiments.e164_constraint_rot.organism_profiles import base_factory

    with pytest.raises(ValueError, match="lm_loader"):
        base_factory("tiny:elsewhere", RunContext("smoke", "none", None, tmp_path))


def test_the_smoke_base_is_built_into_the_work_dir_without_a_loader(tmp_path: Path) -> None:
    """``tiny:organism`` needs nothing injected: the first load builds it in the run's work dir, later loads (and
    another run's fresh build) read the same weights, so an adapter trained on one load fits the next."""
    from agentmill.experiments.e164_constraint_rot.organism_profiles import base_factory

    load = base_factory("tiny:organism", RunContext("smoke", "none", None, tmp_path / "a"))
    first, again = load(), load()
    assert (tmp_path / "a" / "tiny-base" / "model.safetensors").exists()
    assert first.model is not again.model  # fresh each time: training edits the model in place
    other = base_factory("tiny:organism", RunContext("smoke", "none", None, tmp_path / "b"))()
    assert first.sha256 == again.sha256 == other.sha256 and first.spec == "tiny:organism"


def test_quick_plans_without_training_and_full_runs_the_organism() -> None:
    exp = get(EXP_ID)
    quick, full = exp.setup_for("quick"), exp.setup_for("full")
    assert quick.plan_only and not full.plan_only and not exp.setup_for("smoke").plan_only
    # quick plans the very organism full trains (same content address)
    from agentmill.experiments.e164_constraint_rot.organism_profiles import recipe_of

    assert recipe_of(quick) == recipe_of(full)


def test_plan_only_builds_the_data_and_address_but_trains_nothing(tmp_path: Path, monkeypatch) -> None:
    import agentmill.methods.constraint_rot.organism.train as train

    def refuse(*a, **k):  # planning must never train
        raise AssertionError("plan_only trained")
    monkeypatch.setattr(train, "train_organism", refuse)
    exp = get(EXP_ID)
    s = dataclasses.replace(exp.setup_for("smoke"), plan_only=True)
    ctx = _ctx(tmp_path)
    m = exp.measure(s, ctx)
    assert not set(CLAIM_METRICS) & set(m) and not any(k.endswith("_observed") for k in m)
    assert m["sft_examples"].value == s.n_train
    assert m["adapter_cached"].value == 0 and m["adapter_validated"].value == 0
    assert 0 < m["sft_tokens_mean"].value <= m["sft_tokens_max"].value <= s.max_length
    assert "--profile full" in ctx.data["plan_only"]
    assert not (tmp_path / "work" / "organisms").exists() or not any((tmp_path / "work" / "organisms").iterdir())
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
