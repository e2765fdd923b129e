"""``core.stats.mcnemar_counts``: the one-sided counts form used by Red Queen's replacement rule."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.stats import mcnemar_counts, mcnemar_exact


def test_by_hand() -> None:
    # b = 6, c = 0: P(X >= 6 | Bin(6, 1/2)) = 1/64
    assert mcnemar_counts(6, 0, alternative="greater") == pytest.approx(1 / 64)
    assert mcnemar_counts(0, 6, alternative="greater") == pytest.approx(1.0)
    assert mcnemar_counts(0, 6, alternative="less") == pytest.approx(1 / 64)
    # b = 3, c = 1: P(X >= 3 | Bin(4, 1/2)) = 5/16
    assert mcnemar_counts(3, 1, alternative="greater") == pytest.approx(5 / 16)
    assert mcnemar_counts(0, 0, alternative="greater") == 1.0


def test_two_sided_equals_mcnemar_exact() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        b, c = (int(v) for v in rng.integers(0, 15, 2))
        x = [1] * b + [0] * c + [1] * 3
        y = [0] * b + [1] * c + [1] * 3
        assert mcnemar_counts(b, c) == pytest.approx(mcnemar_exact(x, y).p_value)


def test_vectorised_and_bad_input() -> None:
    p = mcnemar_counts(np.array([6, 3, 0]), np.array([0, 1, 0]), alternative="greater")
    assert p.shape == (3,) and p[0] == pytest.approx(1 / 64) and p[2] == 1.0
    with pytest.raises(ValueError):
        mcnemar_counts(1, 2, alternative="bigger")
    with pytest.raises(ValueError):
        mcnemar_counts(-1, 2)
    with pytest.raises(ValueError):
        mcnemar_counts(1.5, 2)
