"""Calibration from labelled candidate records: the prior, each critic's likelihoods (Beta(1,1) smoothing, [C]
``calibration/from_spotcheck.py``), the refinement kernel from consecutive pairs, a critic-independence check and a
drift alarm [R].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from itertools import combinations
from typing import Any

import numpy as np

from agentmill.methods.bayes_ship.config import Calibration, CriticModel, Kernel
from agentmill.methods.bayes_ship.replay import CandidateRecord


def calibrate(records: Iterable[CandidateRecord], critics: Sequence[str], *, smoothing: float = 1.0,
              first_only_prior: bool = True, provenance: dict[str, Any] | None = None) -> Calibration:
    """Fit a :class:`Calibration`.

    p_pass_y1 = (passes among correct + s) / (correct + 2s), likewise for wrong ones (s = ``smoothing``, Beta(1,1)
    at 1). The prior is the share of correct first candidates (``first_only_prior``; all candidates otherwise). The
    kernel counts consecutive (y_t, y_t+1) pairs: P_fix = (n01 + 1)/(n0· + 2), P_break = (n10 + 1)/(n1· + 2) [C];
    with no pairs it is the IID kernel.
    """
    recs = list(records)
    for r in recs:
        if r.y is None:
            raise ValueError(f"record {r.candidate_id} of {r.instance_id} has no label y: it cannot calibrate")
        missing = [k for k in critics if k not in r.critics]
        if missing:
            raise ValueError(f"record {r.candidate_id} of {r.instance_id} has no outcome for critic(s) {missing}")
    if not recs:
        raise ValueError("calibrate needs at least one labelled record")
    firsts = [r for r in recs if r.step == 0] if first_only_prior else recs
    firsts = firsts or recs
    n1 = sum(bool(r.y) for r in firsts)
    prior = (n1 + smoothing) / (len(firsts) + 2 * smoothing)
    cs = {}
    y1 = [r for r in recs if r.y]
    y0 = [r for r in recs if not r.y]
    for k in critics:
        k1 = sum(r.critics[k] for r in y1)
        k0 = sum(r.critics[k] for r in y0)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cs[k] = CriticModel(k, (k1 + smoothing) / (len(y1) + 2 * smoothing),
                                (k0 + smoothing) / (len(y0) + 2 * smoothing), len(y1), len(y0))
    by: dict[str, list[CandidateRecord]] = {}
    for r in recs:
        by.setdefault(r.instance_id, []).append(r)
    n01 = n00 = n10 = n11 = 0
    for g in by.values():
        g = sorted(g, key=lambda r: r.step)
        for a, b in zip(g, g[1:]):
            if a.y:
                n11 += bool(b.y)
                n10 += not b.y
            else:
                n01 += bool(b.y)
                n00 += not b.y
    pairs = n01 + n00 + n10 + n11
    kernel = (Kernel((n01 + 1) / (n01 + n00 + 2), (n10 + 1) / (n10 + n11 + 2), pairs, "pairs") if pairs
              else Kernel.iid(prior))
    prov = {"n": len(recs), "instances": len(by), "date": date.today().isoformat(),
            "generators": sorted({r.generator for r in recs}), "repos": sorted({r.repo for r in recs})}
    prov.update(provenance or {})
    return Calibration(prior, len(firsts), cs, kernel, prov)


def iid_kernel(calib: Calibration) -> Calibration:
    """``calib`` with its kernel replaced by the IID one (fresh samples)."""
    return Calibration(calib.prior, calib.prior_n, calib.critics, Kernel.iid(calib.prior), calib.provenance)


@dataclass(frozen=True)
class IndependenceRow:
    a: str
    b: str
    y: bool
    cmi: float
    """Mutual information (nats) between the two critics' outcomes among candidates with this label."""
    p_value: float
    n: int


def _mi(x: np.ndarray, z: np.ndarray) -> float:
    n = x.size
    if n == 0:
        return math.nan
    out = 0.0
    for a in (0, 1):
        for b in (0, 1):
            pab = np.mean((x == a) & (z == b))
            pa, pb = np.mean(x == a), np.mean(z == b)
            if pab > 0:
                out += pab * math.log(pab / (pa * pb))
    return out


def critic_independence(records: Iterable[CandidateRecord], pairs: Sequence[tuple[str, str]] | None = None,
                        n_perm: int = 2000, seed: int = 0) -> list[IndependenceRow]:
    """Per critic pair and label, the mutual information of their outcomes (conditional independence given Y means
    0) with a permutation p-value (shuffle one critic's outcomes within the label) [R]."""
    recs = [r for r in records if r.y is not None]
    names = sorted({k for r in recs for k in r.critics})
    pairs = list(pairs) if pairs is not None else list(combinations(names, 2))
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in pairs:
        for y in (True, False):
            sub = [r for r in recs if r.y == y and a in r.critics and b in r.critics]
            x = np.array([r.critics[a] for r in sub], dtype=int)
            z = np.array([r.critics[b] for r in sub], dtype=int)
            mi = _mi(x, z)
            if sub and n_perm:
                null = np.array([_mi(x, rng.permutation(z)) for _ in range(n_perm)])
                p = float((1 + np.sum(null >= mi - 1e-12)) / (n_perm + 1))
            else:
                p = math.nan
            rows.append(IndependenceRow(a, b, y, mi, p, len(sub)))
    return rows


@dataclass(frozen=True)
class DriftAlarm:
    critic: str
    y: bool
    expected: float
    interval: tuple[float, float]
    observed: float
    n: int

    def __str__(self) -> str:
        return (f"{self.critic} | y={int(self.y)}: pass rate {self.observed:.3f} over {self.n} outside the "
                f"{self.interval[0]:.3f}–{self.interval[1]:.3f} predictive interval (calibrated {self.expected:.3f})")


def drift_check(calib: Calibration, new_records: Iterable[CandidateRecord], level: float = 0.99
                ) -> list[DriftAlarm]:
    """An alarm per (critic, label) whose pass count among newly labelled candidates leaves the
    ``level`` posterior-predictive interval of the calibration (beta-binomial with the Beta posterior of the
    calibration counts) [R]."""
    from scipy.stats import betabinom

    recs = [r for r in new_records if r.y is not None]
    out = []
    a = (1 - level) / 2
    for k, c in calib.critics.items():
        for y, p, n_cal in ((True, c.p_pass_y1, c.n_y1), (False, c.p_pass_y0, c.n_y0)):
            sub = [r.critics[k] for r in recs if r.y == y and k in r.critics]
            n = len(sub)
            if n == 0:
                continue
            if n_cal > 0:
                k_cal = p * (n_cal + 2) - 1
                al, be = k_cal + 1, n_cal - k_cal + 1
            else:  # no counts: treat p as known from 1000 pseudo-observations
                al, be = p * 1000 + 1e-9, (1 - p) * 1000 + 1e-9
            dist = betabinom(n, al, be)
            lo, hi = dist.ppf(a), dist.ppf(1 - a)
            kk = int(sum(sub))
            if kk < lo or kk > hi:
                out.append(DriftAlarm(k, y, p, (lo / n, hi / n), kk / n, n))
    return out
