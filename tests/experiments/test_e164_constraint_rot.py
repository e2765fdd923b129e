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
    # the A2 note is obeyed by the note-following summariser: it drops at least as often as the clean context
    assert m["dr_attack_note_following"].value >= m["dr_clean_note_following"].value
    assert ctx.data["cr8"]["cases"] >= 1
    assert len(exp.plots(ctx.data, tmp_path)) == 2


def test_claims_come_from_prereg() -> None:
    from agentmill.methods.constraint_rot.prereg import load_prereg

    pr = load_prereg()
    for exp_id in ("e164.constraint_rot_mechanism", "e164.constraint_rot_compression"):
        for c in get(exp_id).claims:
            base = c.id.split("/")[0]
            if base.startswith("H-") or base in ("NC-6b", "CR-5a"):
                continue  # health (spec §2.3), ci_includes / non_increasing encoded as derived metrics
            k = pr.criterion(base)
            assert k.threshold is not None
            assert c.threshold in (k.threshold, -k.threshold), (c.id, c.threshold, k.threshold)
