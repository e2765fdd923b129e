"""The four injection policies of C-injection-control, and the calibration they share.

After SHERLOC's localization each instance has a case file, its confidence features (``sherloc.features``) and,
measured for both conditions, whether the repair agent resolves it with and without the case file. A policy maps an
instance's features to inject / do not inject:

- ``never`` and ``always``;
- ``filter`` (E169's deployable confidence filter, the S-6 policy): ``ConfidenceModel`` (logistic) fitted on the
  calibration split gives p = P(case file localizes every gold file); inject iff p ≥ τ, τ the calibration split's
  resolve-maximising threshold (``injection_decision(p, τ, τ)``: full case file or nothing);
- ``belief`` (E170's controller): each feature, binarised at the threshold that maximises |TPR − FPR| on the
  calibration split, is a critic with measured likelihoods P(pass | correct), P(pass | wrong) (Beta(1,1) smoothed,
  ``bayes_ship.calibration.calibrate``; critics with identical outcomes on every calibration instance form one
  family, of which only the first moves the belief); the belief starts at the calibration prior, takes every critic's
  outcome (the features cost ~0 compute next to the localization that produced them: critic cost 0) and
  ``bayes_ship.decide`` compares the expected utility of injecting, R·b − L·(1 − b) (the controller's "ship"), with
  not injecting, 0 ("give up"); a tie injects. R is the measured resolve gain of injecting a correct case file, L
  the resolve loss of injecting a wrong one, both on the calibration split; verifying is priced out (c_ver = 2R)
  and one candidate exists (no "generate"). So it injects iff b ≥ L / (R + L).
- ``oracle`` (ceiling, not deployable): inject iff the case file is correct (reads the gold patch).

Calibration and evaluation splits are disjoint sets of instances (:func:`split`); every threshold, likelihood and
utility is fitted on the calibration split only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for

POLICIES = ("never", "always", "filter", "belief", "oracle")
"""The arms, in the order the record and the plot show them; ``oracle`` is the non-deployable ceiling."""
EPS_GAIN = 1e-3
"""[R] R must be > 0 for the cost model: a calibration split where injecting a correct case file never helped
gives R = this (injecting then wins only where it cannot hurt, L = 0)."""


def split(ids: Sequence[str], calib_share: float, seed: int) -> tuple[list[str], list[str]]:
    """(calibration ids, evaluation ids): a seeded permutation of ``ids`` cut at ``calib_share``; disjoint, and
    both non-empty when there are ≥ 2 distinct ids."""
    uniq = list(dict.fromkeys(ids))
    if len(uniq) != len(ids):
        raise ValueError("instance ids must be unique to split them")
    if not 0 < calib_share < 1:
        raise ValueError(f"calib_share must be in (0, 1), got {calib_share}")
    order = rng_for("compose_injection_control.split", seed).permutation(len(uniq))
    n_cal = min(max(1, round(calib_share * len(uniq))), len(uniq) - 1) if len(uniq) >= 2 else len(uniq)
    cal = sorted(uniq[i] for i in order[:n_cal])
    return cal, sorted(uniq[i] for i in order[n_cal:])


def best_threshold(x: Sequence[float], y: Sequence[int]) -> tuple[float, float] | None:
    """(t, TPR − FPR) of the cut "pass iff x ≥ t" that maximises |TPR − FPR| on labelled rows (t a midpoint between
    consecutive distinct values; the first of tied cuts), or None when x is constant or a class is empty."""
    xv, yv = np.asarray(x, dtype=float), np.asarray(y, dtype=bool)
    vals = np.unique(xv)
    if len(vals) < 2 or yv.all() or not yv.any():
        return None
    best: tuple[float, float] | None = None
    for t in (vals[1:] + vals[:-1]) / 2:
        p = xv >= t
        j = float(p[yv].mean() - p[~yv].mean())
        if best is None or abs(j) > abs(best[1]) + 1e-12:
            best = (float(t), j)
    return best


@dataclass
class BeliefPolicy:
    """The fitted belief controller: thresholds, the bayes_ship calibration and cost model (see module doc)."""

    thresholds: dict[str, float]
    calibration: Any
    cost: Any
    gain: float
    loss: float
    dropped: dict[str, str] = field(default_factory=dict)

    def outcomes(self, feats: Mapping[str, float]) -> dict[str, bool]:
        return {k: float(feats[k]) >= t for k, t in self.thresholds.items()}

    def belief(self, feats: Mapping[str, float]) -> float:
        from agentmill.methods.bayes_ship import Belief

        b = Belief(self.calibration.prior)
        seen: set[str] = set()
        for k, passed in self.outcomes(feats).items():
            cm = self.calibration.critics[k]
            if cm.family is not None and cm.family in seen:  # a later member of a family adds no evidence
                continue
            seen.add(cm.family or k)
            b = b.update(cm, passed)
        return b.value

    def decision(self, feats: Mapping[str, float]) -> Any:
        """bayes_ship's ``Decision`` after every critic's outcome: action "ship" = inject, "give_up" = do not."""
        from agentmill.methods.bayes_ship import BayesShipConfig, decide

        d = decide(self.belief(feats), self.cost, self.calibration, used=tuple(self.thresholds),
                   cfg=BayesShipConfig(max_candidates=1))
        if d.action not in ("ship", "give_up"):  # verify is priced out and there is no second candidate
            raise RuntimeError(f"belief policy: unexpected action {d.action!r}")
        return d

    def inject(self, feats: Mapping[str, float]) -> bool:
        return self.decision(feats).action == "ship"

    def summary(self) -> dict[str, Any]:
        return {"prior": self.calibration.prior, "gain_R": self.gain, "loss_L": self.loss,
                "belief_threshold": self.loss / (self.gain + self.loss),
                "critics": {k: {"threshold": t, "p_pass_correct": self.calibration.critics[k].p_pass_y1,
                                "p_pass_wrong": self.calibration.critics[k].p_pass_y0,
                                "gap": self.calibration.critics[k].gap,
                                "family": self.calibration.critics[k].family}
                            for k, t in self.thresholds.items()},
                "dropped": dict(self.dropped)}


def _smoothed(k: float, n: int) -> float:
    return (k + 1.0) / (n + 2.0)


def utility_terms(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """(R, L) from calibration rows (``correct``, ``resolved_none``, ``resolved_injected``): R = P(resolve | inject,
    correct) − P(resolve | none, correct), floored at :data:`EPS_GAIN`; L = P(resolve | none, wrong) −
    P(resolve | inject, wrong), floored at 0; rates Beta(1,1) smoothed (an empty class gives 0)."""
    def rate(cond: str, correct: bool) -> float:
        sel = [r for r in rows if bool(r["correct"]) == correct]
        return _smoothed(sum(float(r[cond]) for r in sel), len(sel))

    gain = rate("resolved_injected", True) - rate("resolved_none", True)
    loss = rate("resolved_none", False) - rate("resolved_injected", False)
    return max(gain, EPS_GAIN), max(loss, 0.0)


def fit_belief(rows: Sequence[Mapping[str, Any]], feature_names: Sequence[str]) -> BeliefPolicy:
    """Fit the belief controller on calibration rows (``instance``, ``features``, ``correct``, ``resolved_*``)."""
    import warnings

    from agentmill.methods.bayes_ship import Calibration, CostModel, CriticModel, Kernel
    from agentmill.methods.bayes_ship.calibration import calibrate
    from agentmill.methods.bayes_ship.replay import CandidateRecord

    y = [int(bool(r["correct"])) for r in rows]
    thresholds: dict[str, float] = {}
    dropped: dict[str, str] = {}
    for k in feature_names:
        bt = best_threshold([r["features"][k] for r in rows], y)
        if bt is None:
            dropped[k] = "constant on the calibration split, or one class is empty"
        else:
            thresholds[k] = bt[0]
    recs = [CandidateRecord(str(r["instance"]), "0", 0, {k: float(r["features"][k]) >= t
                                                         for k, t in thresholds.items()}, bool(r["correct"]))
            for r in rows]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = calibrate(recs, tuple(thresholds))
    critics = {}
    first_of: dict[tuple[bool, ...], str] = {}
    for k, cm in cal.critics.items():
        if cm.gap == 0.0:  # no signal after smoothing: the update would be a no-op
            dropped[k] = "zero gap after Beta(1,1) smoothing"
            thresholds.pop(k)
            continue
        # critics whose outcomes agree on every calibration instance are one family: only the first of a family
        # moves the belief (bayes_ship's family rule), so one signal read off five features is not counted five times
        pattern = tuple(bool(r.critics[k]) for r in recs)
        fam = first_of.setdefault(pattern, k)
        critics[k] = CriticModel(k, cm.p_pass_y1, cm.p_pass_y0, cm.n_y1, cm.n_y0, family=fam)
    calib = Calibration(cal.prior, cal.prior_n, critics, Kernel.iid(cal.prior),
                        {"source": "compose_injection_control calibration split", "n": len(rows)})
    gain, loss = utility_terms(rows)
    cost = CostModel(R=gain, c_gen=0.0, c_ver=2 * gain, critic_costs={k: 0.0 for k in critics},
                     wrong_ship_loss=loss)
    return BeliefPolicy(thresholds, calib, cost, gain, loss, dropped)


@dataclass
class FilterPolicy:
    """E169's deployable filter with one threshold: inject the full case file iff p ≥ τ."""

    model: Any
    tau: float

    def score(self, feats: Mapping[str, float]) -> float:
        return self.model.predict(feats)

    def inject(self, feats: Mapping[str, float]) -> bool:
        from agentmill.methods.sherloc import injection_decision

        return injection_decision(self.score(feats), self.tau, self.tau) == "full"


def fit_filter(rows: Sequence[Mapping[str, Any]]) -> FilterPolicy:
    """Logistic ``ConfidenceModel`` on the calibration rows, τ ∈ {0, the rows' scores, 1} maximising the rows'
    resolve rate under the policy (ties: the smallest τ)."""
    from agentmill.methods.sherloc import ConfidenceModel

    model = ConfidenceModel().fit([r["features"] for r in rows], [int(bool(r["correct"])) for r in rows])
    ps = [model.predict(r["features"]) for r in rows]
    best_tau, best = 0.0, -math.inf
    for tau in sorted({0.0, 1.0, *ps}):
        res = float(np.mean([r["resolved_injected"] if p >= tau else r["resolved_none"] for r, p in zip(rows, ps)]))
        if res > best + 1e-12:
            best_tau, best = tau, res
    return FilterPolicy(model, best_tau)


def choices(rows: Sequence[Mapping[str, Any]], belief: BeliefPolicy, filt: FilterPolicy) -> dict[str, np.ndarray]:
    """Per policy, the boolean inject vector over ``rows`` (evaluation rows)."""
    return {"never": np.zeros(len(rows), dtype=bool), "always": np.ones(len(rows), dtype=bool),
            "filter": np.array([filt.inject(r["features"]) for r in rows], dtype=bool),
            "belief": np.array([belief.inject(r["features"]) for r in rows], dtype=bool),
            "oracle": np.array([bool(r["correct"]) for r in rows], dtype=bool)}


def outcome(rows: Sequence[Mapping[str, Any]], inject: np.ndarray, what: str = "resolved") -> np.ndarray:
    """Per row, ``<what>_injected`` where the policy injects and ``<what>_none`` where it does not."""
    return np.array([float(r[f"{what}_injected"] if i else r[f"{what}_none"]) for r, i in zip(rows, inject)])
