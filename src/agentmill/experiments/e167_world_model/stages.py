"""What the e167 experiments share: the pipeline config of each profile, paired item-level estimates, and the scale
note every learning claim carries. Not an experiment (no ``EXPERIMENT``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap, paired_diff

PIPELINES = ("smoke", "quick", "full")

SCALE = ("tiny transformer (2 layers, d = 64, 1,024-token BPE, ≈ 0.25M parameters) trained from scratch on CPU on "
         "KeyDoor transitions (3 rooms, 1 lock; 40 SFT layouts, 160 CPT layouts, 30 test layouts, 96 test items; "
         "card on, no history window), one training seed; the paper trains 35B/397B MoE models on > 10M real "
         "trajectories in 7 domains. Text only, one domain.")

TINY_SPEC = "tiny:2x64-bpe1024 trained here (cached stages)"


def wm_config(pipeline: str):
    from agentmill.methods.world_model.config import QUICK, SMOKE, WMConfig

    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {pipeline!r}")
    return {"smoke": SMOKE, "quick": QUICK, "full": WMConfig()}[pipeline]


def paired(a: Sequence[float], b: Sequence[float], clusters: Sequence[Any] | None = None, *,
           n_boot: int = 10_000, seed: int = 0) -> Estimate:
    """mean(a − b) with a paired bootstrap CI; with ``clusters`` (layouts) a cluster bootstrap over them."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if clusters is None or len(set(clusters)) < 2:
        return paired_diff(x, y, n_boot=n_boot, seed=seed)
    d = x - y
    return cluster_bootstrap(lambda idx: float(d[idx].mean()), list(clusters), n_boot=n_boot, seed=seed)


def mean_ci(a: Sequence[float], clusters: Sequence[Any] | None = None, *, n_boot: int = 10_000,
            seed: int = 0) -> Estimate:
    x = np.asarray(a, float)
    if clusters is None or len(set(clusters)) < 2:
        from agentmill.core.stats import mean_estimate

        return mean_estimate(x, n_boot=n_boot, seed=seed)
    return cluster_bootstrap(lambda idx: float(x[idx].mean()), list(clusters), n_boot=n_boot, seed=seed)
