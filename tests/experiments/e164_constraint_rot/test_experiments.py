"""E164 ConstraintRot experiments at the smoke profile: they run, record their tables and plots, and the exact
model-free claims come out as the mechanism says (checked on the numbers, since smoke is never judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _run(exp_id: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    exp = get(exp_id)
    ctx = RunContext("smoke", "none", None, tmp_path)
    metrics = exp.measure(exp.setup_for("smoke"), ctx)
    assert set(exp.judge("smoke", metrics).values()) == {"not_judged"}
    assert all(c.metric in metrics for c in exp.claims), [c.metric for c in exp.claims if c.metric not in metrics]
    return exp, ctx, metrics


@pytest.mark.slow
def test_mechanism_smoke(tmp_path: Path) -> None:
    exp, ctx, m = _run("e164.constraint_rot_mechanism", tmp_path)
    verdicts = exp.judge("quick", m)  # the exact claims are judgeable on smoke numbers too
    assert set(verdicts.values()) == {"supported"}, verdicts
    assert m["v_full_context"].value == 0.0 and m["v_never_stated"].value == 1.0
    table = ctx.data["violation_table"]
    assert set(table) == {"window", "head_tail", "tool_clear", "extractive", "structured", "note_following"}
    assert all(row["pinned:1"] == 0.0 for row in table.values())
    # violation = 1 - survival, cell by cell, and eviction is not vacuous somewhere
    assert all(abs(row[f"rounds:{k}"] + row[f"survival:{k}"] - 1.0) < 1e-12 for row in table.values()
               for k in (1, 2))
    assert any(row["rounds:1"] > 0 for row in table.values())
    assert len(exp.plots(ctx.data, tmp_path)) == 2


@pytest.mark.slow
def test_compression_smoke(tmp_path: Path) -> None:
    exp, ctx, m = _run("e164.constraint_rot_compression", tmp_path)
    curves = ctx.data["cr5"]["curves"]
    assert set(curves) == {"tfidf", "recency_tfidf", "constraint_aware"}
    for c in curves.values():
        s = c["survival"]
        assert all(b <= a for a, b in zip(s, s[1:]))
    assert m["cr5_max_rise"].value <= 0.0
    cr8 = ctx.data["cr8"]
    assert cr8["cases"] >= 1 and cr8["dev_cases"] >= 1
    # the note-following summariser obeys a note: the fixed A2 probe drops at least as often as the clean context
    assert m["dr_fixed_note_following"].value >= m["dr_clean_note_following"].value
    # the extractive ratio comes from the dev grid, and the chosen attacks are frozen records of the A1–A6 search
    assert cr8["extractive_ratio"] in {float(r) for r in cr8["extractive_tuning"]}
    for t, row in cr8["targets"].items():
        assert row["template"] in {"A1", "A2", "A3", "A4", "A5", "A6"}
        assert row["optimised_attack"]["n_dev"] == cr8["dev_cases"]
        # the transfer matrix's own-target cell is the judged drop rate
        assert cr8["transfer"][f"optimised:{t}"][t] == pytest.approx(row["attack"])
        assert cr8["transfer"]["fixed:A2"][t] == pytest.approx(row["fixed"])
        assert cr8["transfer_clean"][t] == pytest.approx(row["clean"])
    # CR-8d: a rule-reading actor under pinning ignores the eviction
    assert m["v_pinned_attack_max"].value == 0.0
    assert set(ctx.data["cr8d"]) == {"note_following", "extractive_ca"}
    assert len(exp.plots(ctx.data, tmp_path)) == 3


def test_compression_ratio_tuning_rule() -> None:
    from agentmill.experiments.e164_constraint_rot.attack_analysis import tightest_ratio

    surv = {0.05: 0.70, 0.1: 0.91, 0.25: 0.89, 0.5: 0.97}
    assert tightest_ratio(surv, 0.90) == 0.1  # the tightest ratio that keeps 90 %, even past a dip
    assert tightest_ratio(surv, 0.95) == 0.5
    assert tightest_ratio(surv, 0.99) == 0.5  # nothing reaches it: the loosest ratio
    with pytest.raises(ValueError):
        tightest_ratio({}, 0.9)


def test_claims_come_from_prereg() -> None:
    from agentmill.methods.constraint_rot.prereg import load_prereg

    pr = load_prereg()
    for exp_id in ("e164.constraint_rot_mechanism", "e164.constraint_rot_compression"):
        for c in get(exp_id).claims:
            base = c.id.split("/")[0]
            if base.startswith("H-") or base in ("NC-6b", "CR-5a"):
                continue  # health checks, ci_includes / non_increasing encoded as derived metrics
            k = pr.criterion(base)
            assert k.threshold is not None
            assert c.threshold in (k.threshold, -k.threshold), (c.id, c.threshold, k.threshold)
