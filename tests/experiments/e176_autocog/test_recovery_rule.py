"""AC-7's per-profile verdict metrics (pre-registered [R]) on hand-made run records (quick: >= 12/15 cells with 1 seed;
full: every cell with >= 5 seeds); the per-run and per-cell rules are tested in tests/methods/autocog."""

from __future__ import annotations

import pytest

import agentmill.experiments.e176_autocog.recovery as E


def _run(r: float, best: float) -> dict:
    return {"r": r, "best_seed_r": best, "delta_r": r - best}


def test_spec_sentences_are_quoted_in_the_claims() -> None:
    src = {c.id: c.source for c in E.CLAIMS}
    assert "pass = ≥ 12/15 cells with r ≥ .90" in src["E176-AC7-quick"]
    assert "where the best seed r < 0.85, also Δr ≥ 0.10" in src["E176-AC7"]
    assert E.EXPERIMENT.claims[1].threshold == pytest.approx(0.8)


def _cells(n_pass: int, seeds: int, n: int = 15) -> dict:
    return {(f"g{i}", 0.0): [_run(0.95, 0.5) if i < n_pass else _run(0.92, 0.84)] * seeds for i in range(n)}


def test_quick_rule_twelve_of_fifteen() -> None:
    quick = E.CLAIMS[1]
    m12, m11 = E.ac7_rule_metrics(_cells(12, 1), 1), E.ac7_rule_metrics(_cells(11, 1), 1)
    assert quick.judge(m12["ac7_quick_cell_pass_fraction"]) == "supported"
    assert quick.judge(m11["ac7_quick_cell_pass_fraction"]) == "not_supported"
    # the literal r-only reading counts the Δr-failing cells too (reported, not judged)
    assert m11["ac7_quick_cells_r_ge_090"].value == 15
    assert "ac7_full_cell_pass_fraction" not in m12


def test_full_rule_every_cell() -> None:
    full = E.CLAIMS[0]
    m15, m14 = E.ac7_rule_metrics(_cells(15, 5), 5), E.ac7_rule_metrics(_cells(14, 5), 5)
    assert full.judge(m15["ac7_full_cell_pass_fraction"]) == "supported"
    assert full.judge(m14["ac7_full_cell_pass_fraction"]) == "not_supported"
    assert "ac7_quick_cell_pass_fraction" not in m15
    # 3 seeds fit neither profile's rule: nothing judged
    m3 = E.ac7_rule_metrics(_cells(15, 3), 3)
    assert E.EXPERIMENT.judge("quick", m3)["E176-AC7"] == "inconclusive"
    assert E.EXPERIMENT.judge("quick", m3)["E176-AC7-quick"] == "inconclusive"
