"""The belief as a correctness score: AUROC and PRR with intervals that resample instances, not candidates.

Point values come from ``core.stats.auroc`` and ``core.calibration.prr``; intervals from
``core.stats.cluster_bootstrap``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentmill.core.calibration import brier, ece, prr
from agentmill.core.stats import Estimate, auroc, cluster_bootstrap
from agentmill.methods.bayes_ship.config import Calibration
from agentmill.methods.bayes_ship.core import Belief
from agentmill.methods.bayes_ship.replay import CandidateRecord


def _ci(fn, scores: Sequence[float], labels: Sequence[bool], clusters: Sequence, n_boot: int, seed: int) -> Estimate:
    s = np.asarray(scores, float)
    y = np.asarray(labels, bool)
    return cluster_bootstrap(lambda rows: fn(s[rows], y[rows]), np.asarray(clusters), n_boot=n_boot, seed=seed)


def auroc_ci(scores: Sequence[float], labels: Sequence[bool], clusters: Sequence, *, n_boot: int = 1000,
             seed: int = 0) -> Estimate:
    return _ci(auroc, scores, labels, clusters, n_boot, seed)


def prr_ci(scores: Sequence[float], labels: Sequence[bool], clusters: Sequence, *, n_boot: int = 1000,
           seed: int = 0) -> Estimate:
    return _ci(prr, scores, labels, clusters, n_boot, seed)


def auroc_diff_ci(a: Sequence[float], b: Sequence[float], labels: Sequence[bool], clusters: Sequence, *,
                  n_boot: int = 1000, seed: int = 0) -> Estimate:
    """AUROC(a) − AUROC(b) on the same candidates, paired by resampling instances."""
    sa, sb = np.asarray(a, float), np.asarray(b, float)
    y = np.asarray(labels, bool)
    return cluster_bootstrap(lambda r: auroc(sa[r], y[r]) - auroc(sb[r], y[r]), np.asarray(clusters),
                             n_boot=n_boot, seed=seed)


def full_evidence_belief(rec: CandidateRecord, calib: Calibration, *, prior: float | None = None,
                         critics: Sequence[str] | None = None) -> float:
    """The belief after every (listed) critic's outcome on ``rec``, starting from ``prior`` (default: the
    calibration's prior)."""
    b = Belief(calib.prior if prior is None else prior)
    for k in critics if critics is not None else calib.critics:
        if k in rec.critics:
            b = b.update(calib.critics[k], rec.critics[k])
    return b.value


def fraction_passed(rec: CandidateRecord, critics: Sequence[str] | None = None) -> float:
    """The raw tool-success baseline: the share of critics that passed."""
    ks = [k for k in (critics if critics is not None else rec.critics) if k in rec.critics]
    return sum(rec.critics[k] for k in ks) / len(ks) if ks else 0.0


__all__ = ["auroc_ci", "prr_ci", "auroc_diff_ci", "full_evidence_belief", "fraction_passed", "brier", "ece"]
