"""ConstraintRot's statistical convention, Wilson at z = 1.96 (§2.11), by the closed form. The statistics themselves
(McNemar, Holm, the two-stage bootstrap, the variance decomposition) are tested in tests/core/test_stats.py."""

from __future__ import annotations

import pytest

from agentmill.methods.constraint_rot.stats import WILSON_Z
from tests.methods.constraint_rot.contexts import wilson


# -- Wilson ----------------------------------------------------------------------------------------------------------
def test_wilson_3_of_10_by_hand():
    # p = 0.3, z² = 3.8416, 1 + z²/n = 1.38416; centre = (0.3 + 0.19208)/1.38416 = 0.355508;
    # half = 1.96·sqrt(0.021 + 0.009604)/1.38416 = 0.247717
    lo, hi = wilson(3, 10)
    assert lo == pytest.approx(0.355508 - 0.247717, abs=2e-5)
    assert hi == pytest.approx(0.355508 + 0.247717, abs=2e-5)


def test_wilson_at_zero_and_n():
    # k = 0: centre = half-width = (z²/2n)/(1 + z²/n), so lo = 0, hi = (z²/n)/(1 + z²/n) = 0.38416/1.38416
    assert wilson(0, 10) == pytest.approx((0.0, 0.38416 / 1.38416), abs=1e-6)
    lo, hi = wilson(10, 10)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(1 - 0.38416 / 1.38416, abs=1e-6)


def test_wilson_z_is_the_recorded_level():
    from agentmill.core.stats import proportion_estimate

    e = proportion_estimate(3, 10, z=WILSON_Z)
    assert e.level == pytest.approx(0.9500042, abs=1e-7) and (e.lo, e.hi) == wilson(3, 10)
