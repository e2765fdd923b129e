"""ConstraintRot's statistical conventions (docs/methods/constraint_rot.md "Hyperparameters"), and only those. The
statistics themselves are the core's (:mod:`agentmill.core.stats`, one copy each): Wilson intervals are
:func:`~agentmill.core.stats.proportion_estimate` at ``z=WILSON_Z``; the two-stage bootstrap is
:func:`~agentmill.core.stats.two_stage_bootstrap` with ``cluster=CLUSTER, unit=UNIT``; exact McNemar, Holm and the
crossing's two-way variance decomposition (docs/methods/constraint_rot.md "Experiments and commands") are
:func:`~agentmill.core.stats.mcnemar_exact`, :func:`~agentmill.core.stats.holm` and
:func:`~agentmill.core.stats.variance_decomposition`.
"""

from __future__ import annotations

WILSON_Z = 1.96
"""Wilson intervals at z = 1.96 (docs/methods/constraint_rot.md "Hyperparameters"), whose coverage 2Φ(1.96) − 1 =
0.950004 is the level the Estimates record."""

CLUSTER, UNIT = "family", "episode_id"
"""The two-stage bootstrap (docs/methods/constraint_rot.md "Hyperparameters") draws rule families, then episodes inside
each drawn family (a family's episodes share a predicate and phrasing pool, so they are dependent); all rows of one
episode (its conditions) travel together, which is what makes a difference of two conditions paired."""

__all__ = ["CLUSTER", "UNIT", "WILSON_Z"]
