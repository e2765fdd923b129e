"""Argument checks shared by every policy-gradient step over a :class:`~agentmill.core.types.StepTable`.

The tabular softmax step (``envs.policies.pg_step``) and the LM step (``lm.policy.LoRACandidatePolicy.pg_update``)
take the same inputs and must refuse the same bad ones; this is the one place that says how.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentmill.core.types import StepTable

NORMALIZE = ("rows", "trajectories", "none")
"""What a summed per-row gradient is divided by: the rows, the trajectories, or nothing."""


def pg_inputs(steps: StepTable, advantages: Any, *, kl_coef: float, ref: Any, normalize: str
              ) -> tuple[np.ndarray, int]:
    """(advantages as float64 (R,), the normaliser n) after checking shapes, finiteness and the KL arguments."""
    adv = np.asarray(advantages, dtype=np.float64)
    if adv.shape != (len(steps),):
        raise ValueError(f"advantages must have shape ({len(steps)},), got {adv.shape}")
    if not np.all(np.isfinite(adv)):
        raise ValueError("advantages must be finite")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and ref is None:
        raise ValueError("kl_coef > 0 needs a reference policy (ref=)")
    if normalize == "rows":
        n = len(steps)
    elif normalize == "trajectories":
        n = steps.n_trajectories
    elif normalize == "none":
        n = 1
    else:
        raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
    return adv, n
