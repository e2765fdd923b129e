"""The crossing decomposition (CR-10) by hand: η² of a cell-mean matrix, the cell means, the bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.methods.constraint_rot.crossing import cell_means, decomposition, eta


def test_eta_on_a_hand_checked_matrix() -> None:
    # grand mean 0.45; row means 0.1, 0.8 → SS_rows = 2·(0.35² + 0.35²) = 0.49; column means 0.3, 0.6 →
    # SS_cols = 2·(0.15² + 0.15²) = 0.09; SS_total = 0.45² + 0.25² + 0.15² + 0.55² = 0.59
    e = eta([[0.0, 0.2], [0.6, 1.0]])
    assert e["eta2_S"] == pytest.approx(0.49 / 0.59)
    assert e["eta2_A"] == pytest.approx(0.09 / 0.59)
    assert e["margin"] == pytest.approx((0.49 - 3 * 0.09) / 0.59)  # 0.22 / 0.59 > 0: the claim holds
    assert e["ratio"] == pytest.approx(0.49 / 0.09)


def test_eta_actor_dominated_fails_and_identical_columns_give_infinite_ratio() -> None:
    # the transpose: actors explain 0.49/0.59, summarisers 0.09/0.59 → margin (0.09 − 1.47)/0.59 < 0
    e = eta([[0.0, 0.6], [0.2, 1.0]])
    assert e["margin"] == pytest.approx((0.09 - 3 * 0.49) / 0.59)
    same = eta([[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]])  # two identical RuleReader columns
    assert same["eta2_S"] == pytest.approx(1.0) and same["eta2_A"] == 0.0 and math.isinf(same["ratio"])
    flat = eta([[0.5, 0.5], [0.5, 0.5]])
    assert all(math.isnan(flat[k]) for k in ("eta2_S", "eta2_A", "margin", "ratio"))


def _rows(matrix: list[list[int]], n_eps: int) -> list[dict]:
    """Per episode, one row per (compactor, actor) with violation = matrix[s][a] on even episodes, 0 on odd ones."""
    comps, actors = [f"c{i}" for i in range(len(matrix))], [f"a{j}" for j in range(len(matrix[0]))]
    return [{"family": f"f{e % 3}", "episode_id": f"e{e}", "compactor": c, "actor": a,
             "violation": bool(matrix[i][j]) and e % 2 == 0}
            for e in range(n_eps) for i, c in enumerate(comps) for j, a in enumerate(actors)]


def test_cell_means_counts_and_missing_cell() -> None:
    rows = _rows([[1, 0], [1, 1]], 4)
    np.testing.assert_allclose(cell_means(rows, ["c0", "c1"], ["a0", "a1"]), [[0.5, 0.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="'c2'"):
        cell_means(rows, ["c0", "c2"], ["a0", "a1"])


def test_decomposition_bootstrap_brackets_the_point() -> None:
    rows = _rows([[0, 0], [1, 1], [1, 0]], 12)
    d = decomposition(rows, ["c0", "c1", "c2"], ["a0", "a1"], B=200)
    x = cell_means(rows, ["c0", "c1", "c2"], ["a0", "a1"])  # [[0, 0], [.5, .5], [.5, 0]]
    assert d["eta_margin"].value == pytest.approx(eta(x)["margin"])
    for k in ("eta2_s", "eta2_a", "eta_margin"):
        assert d[k].lo <= d[k].value <= d[k].hi and d[k].n == 3
    assert d["eta2_s"].value + d["eta2_a"].value <= 1.0 + 1e-12
