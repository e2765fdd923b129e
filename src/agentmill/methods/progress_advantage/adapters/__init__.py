"""Progress-advantage metrics inside RL trainers [R].

Both verl and TRL already compute the reference log-probs a KL-regularised trainer needs, so the progress
advantage β·Σ_{action tokens}(log π_θ − log π_ref) is free there. :func:`token_progress_metrics` is the
framework-free computation; :mod:`.verl_metrics` and :mod:`.trl_metrics` read each framework's batch layout.
Neither imports its framework at module level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def row_progress_advantage(logp: Any, ref_logp: Any, mask: Any, beta: float) -> np.ndarray:
    """β·Σ_t mask·(logp − ref_logp) per row: (B, L) × 3 → (B,). A row with no masked token is NaN (not 0)."""
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    lp, lr, m = _np(logp), _np(ref_logp), _np(mask)
    if not lp.shape == lr.shape == m.shape or lp.ndim != 2:
        raise ValueError(f"logp, ref_logp and mask must be (B, L) of one shape, got {lp.shape}, {lr.shape}, "
                         f"{m.shape}")
    diff = np.where(m > 0, lp - lr, 0.0)
    out = beta * diff.sum(1)
    out[(m > 0).sum(1) == 0] = np.nan
    return out


def token_progress_metrics(logp: Any, ref_logp: Any, mask: Any, beta: float,
                           traj_ids: Sequence[Any] | None = None, prefix: str = "pa/") -> dict[str, float]:
    """Scalar metrics for a trainer's log: mean/min/max of per-row scores, and — when rows are steps of
    trajectories (verl-agent: one row per step, ``traj_uid``) — the mean over trajectories of their per-trajectory
    sum, min and last step score (rows of one trajectory in batch order)."""
    rows = row_progress_advantage(logp, ref_logp, mask, beta)
    ok = ~np.isnan(rows)
    out = {f"{prefix}row_mean": float(rows[ok].mean()) if ok.any() else float("nan"),
           f"{prefix}row_min": float(rows[ok].min()) if ok.any() else float("nan"),
           f"{prefix}row_max": float(rows[ok].max()) if ok.any() else float("nan"),
           f"{prefix}n_missing": float((~ok).sum())}
    if traj_ids is not None:
        ids = list(traj_ids)
        if len(ids) != rows.size:
            raise ValueError(f"traj_ids has {len(ids)} entries for {rows.size} rows")
        per: dict[Any, list[float]] = {}
        for t, v in zip(ids, rows):
            if not np.isnan(v):
                per.setdefault(t, []).append(float(v))
        if per:
            out[f"{prefix}traj_sum"] = float(np.mean([sum(v) for v in per.values()]))
            out[f"{prefix}traj_min"] = float(np.mean([min(v) for v in per.values()]))
            out[f"{prefix}traj_last"] = float(np.mean([v[-1] for v in per.values()]))
    return out
