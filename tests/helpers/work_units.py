"""Module-level (picklable) work units for executor tests."""

from __future__ import annotations

from agentmill.core.seeding import rng_for


def seeded_mean(key: tuple[int, int]) -> float:
    seed, unit = key
    return float(rng_for(seed, "unit", unit).random(1000).mean())


def fail_on_three(x: int) -> int:
    if x == 3:
        raise RuntimeError("unit 3 failed")
    return x
