"""AC-7's pass rule (spec autocog §7) on hand-made run records: the Δr clause, the 4/5-seed cell rule, and the
per-profile verdict metrics (quick: >= 12/15 cells with 1 seed; full: every cell with >= 5 seeds)."""

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


def test_run_passes_applies_the_delta_r_clause_only_below_best_seed_085() -> None:
    assert E.run_passes(_run(0.95, 0.80))            # Δr .15 >= .10
    assert not E.run_passes(_run(0.92, 0.84))        # best seed < .85 and Δr .08 < .10: stricter reading fails it
    assert E.run_passes(_run(0.92, 0.86))            # best seed >= .85: no Δr clause
    assert not E.run_passes(_run(0.89, 0.10))        # r < .90
    with pytest.raises(ValueError, match="delta_r"):
        E.run_passes({"r": 0.95, "best_seed_r": 0.5})


def test_cell_needs_four_of_five_seeds() -> None:
    good, bad = _run(0.95, 0.5), _run(0.5, 0.5)
    assert E.cell_passes([good] * 4 + [bad])
    assert not E.cell_passes([good] * 3 + [bad] * 2)
    with pytest.raises(ValueError):
        E.cell_passes([])


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
