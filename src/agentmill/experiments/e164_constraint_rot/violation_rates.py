"""Violation rates over episode rows, with Wilson intervals and family-clustered paired bootstrap differences
(the organism grid and the instinct organisms)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate, two_stage_bootstrap


def rate_of(where: Mapping[str, Any], field: str = "violation", labels: Any = None) -> Callable[[Sequence[Any]], float]:
    from agentmill.methods.constraint_rot.metrics import is_trigger

    def stat(rows: Sequence[Any]) -> float:
        xs = [bool(r.get(field)) for r in rows if is_trigger(r) and all(r.get(k) == v for k, v in where.items())
              and (labels is None or r.get("survival_label") in labels)]
        if not xs:
            raise ValueError("empty selection")
        return float(np.mean(xs))
    return stat


def paired_gap(rows: Sequence[Any], a: Callable[..., float], b: Callable[..., float], B: int) -> Estimate:
    from agentmill.methods.constraint_rot.stats import CLUSTER, UNIT

    return two_stage_bootstrap(list(rows), a, paired_with=b, B=B, seed=0, cluster=CLUSTER, unit=UNIT)


def wilson_of(rows: Sequence[Any], field: str = "violation") -> Estimate | None:
    from agentmill.methods.constraint_rot.stats import WILSON_Z

    return proportion_estimate(sum(bool(r.get(field)) for r in rows), len(rows), z=WILSON_Z) if rows else None
