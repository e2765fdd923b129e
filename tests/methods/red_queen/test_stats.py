"""Red Queen's decision numbers: checkpoints, best-belief, the McNemar replacement rule, config errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.methods.red_queen import RedQueenConfig, best_belief, checkpoints, mcnemar_replace
from agentmill.methods.red_queen.stats import max_checkpoints


def test_checkpoints_by_hand() -> None:
    assert checkpoints(512) == [8, 16, 32, 64, 128, 256, 512]
    assert checkpoints(100) == [8, 16, 32, 64, 100]
    assert checkpoints(8) == [8]
    for b in range(8, 3000, 37):
        assert len(checkpoints(b)) <= max_checkpoints(b) == math.floor(math.log2(b / 8)) + 2
    with pytest.raises(ValueError):
        checkpoints(4)


def test_best_belief_values() -> None:  # [D] quoted in the method docs
    assert round(best_belief(7, 3), 3) == 0.436
    assert round(best_belief(8, 2), 3) == 0.530
    assert round(best_belief(9, 1), 3) == 0.636
    assert best_belief(8, 2) > best_belief(7, 3)  # strictly better replaces; a tie is not > itself
    with pytest.raises(ValueError):
        best_belief(-1, 2)


def test_mcnemar_replace_rule() -> None:
    ok, p = mcnemar_replace(10, 0, alpha=0.05, n_tests=4)  # P(X >= 10 | Bin(10, 1/2)) = 1/1024 < 0.0125
    assert ok and p == pytest.approx(1 / 1024)
    ok, p = mcnemar_replace(6, 0, alpha=0.05, n_tests=4)  # 1/64 = 0.0156 > 0.0125: not at K = 4 ...
    assert not ok
    assert mcnemar_replace(6, 0, alpha=0.05, n_tests=1)[0]  # ... but at K = 1
    assert not mcnemar_replace(5, 5, alpha=0.05, n_tests=1)[0]
    assert not mcnemar_replace(0, 0, alpha=0.05, n_tests=1)[0]


@pytest.mark.slow
def test_mcnemar_null_rate_is_controlled() -> None:
    """Statistical: with equal-accuracy challengers the rule replaces at <= alpha (1,000 checkpoints, K = 4)."""
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(1000):
        disc = rng.binomial(200, 0.12, size=4)
        b = rng.binomial(disc, 0.5)
        hits += any(mcnemar_replace(int(x), int(d - x), alpha=0.05, n_tests=4)[0] for x, d in zip(b, disc))
    assert hits / 1000 < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 1000)


@pytest.mark.parametrize("kw", [{"budget": 4}, {"alpha": 0.0}, {"alpha": 1.0}, {"n_challengers": 0},
                                {"statistic": "bayes"}, {"erasure": "delete"}, {"trap": "x"}])
def test_config_errors_name_the_field(kw) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        RedQueenConfig(**kw)
