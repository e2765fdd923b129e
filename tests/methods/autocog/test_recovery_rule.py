"""AC-7's pass rule (pre-registered [R]) on hand-made run records: the Δr clause and the 4/5-seed cell rule."""

from __future__ import annotations

import pytest

from agentmill.methods.autocog.recovery import cell_passes, run_passes


def _run(r: float, best: float) -> dict:
    return {"r": r, "best_seed_r": best, "delta_r": r - best}


def test_run_passes_applies_the_delta_r_clause_only_below_best_seed_085() -> None:
    assert run_passes(_run(0.95, 0.80))            # Δr .15 >= .10
    assert not run_passes(_run(0.92, 0.84))        # best seed < .85 and Δr .08 < .10: stricter reading fails it
    assert run_passes(_run(0.92, 0.86))            # best seed >= .85: no Δr clause
    assert not run_passes(_run(0.89, 0.10))        # r < .90
    with pytest.raises(ValueError, match="delta_r"):
        run_passes({"r": 0.95, "best_seed_r": 0.5})


def test_cell_needs_four_of_five_seeds() -> None:
    good, bad = _run(0.95, 0.5), _run(0.5, 0.5)
    assert cell_passes([good] * 4 + [bad])
    assert not cell_passes([good] * 3 + [bad] * 2)
    with pytest.raises(ValueError):
        cell_passes([])
