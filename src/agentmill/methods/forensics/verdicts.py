"""Arm-vs-control statistics, positive controls and the verdict rules (one set of rules for every hypothesis).

Per arm: two-sided Fisher exact p, Newcombe hybrid-score CI of the difference, Katz log CI of the rate ratio
(``core.stats``); Holm across every test of one investigation. A dose prediction is tested by the Cochran–Armitage
trend (its p enters Holm) and, when it names a ``threshold_range``, the fitted d50's bootstrap CI must lie inside it.

Verdicts (docs/methods/forensics.md, "Verdict rules"):
- ``insensitive``: the positive control failed (its effect is under Δ_pc or its Newcombe bound does not clear 0):
  a null from this instrument would mean nothing;
- ``supported``: every prediction holds in its direction with Holm-adjusted p ≤ α (two-sided predictions: any
  direction), dose ranges included;
- ``refuted``: the positive control passed, no arm of the hypothesis was underpowered, and some prediction's CI
  excludes its ``min_effect`` (the whole interval short of the predicted effect, in the predicted direction);
- ``inconclusive`` otherwise. ``post_hoc`` and ``replayed`` travel with every row. A malign hypothesis is judged by
  exactly these rules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agentmill.core.stats import Estimate, fisher_exact, holm, newcombe_diff, rate_ratio_ci
from agentmill.methods.forensics.hypotheses import Hypothesis

VERDICTS = ("supported", "refuted", "insensitive", "inconclusive")


@dataclass(frozen=True)
class ArmTest:
    """One arm against the control: counts, Newcombe difference (arm − control), Katz ratio, Fisher p."""

    arm_id: str
    k: int
    n: int
    k0: int
    n0: int
    diff: Estimate
    ratio: Estimate
    p: float


def compare(arm_id: str, k: int, n: int, k0: int, n0: int) -> ArmTest:
    return ArmTest(arm_id, k, n, k0, n0, newcombe_diff(k, n, k0, n0), rate_ratio_ci(k, n, k0, n0),
                   fisher_exact(k, n, k0, n0))


def positive_control_passes(test: ArmTest, delta: float) -> bool:
    """Effect of size ≥ ``delta`` (either sign: a channel control may raise or lower the rate) whose Newcombe
    interval excludes 0 on that side."""
    d = test.diff
    if d.value >= 0:
        return d.value >= delta and d.lo > 0
    return -d.value >= delta and d.hi < 0


@dataclass
class PredictionResult:
    variable: str
    value: Any
    direction: int
    min_effect: float
    effect: Estimate
    p: float
    p_holm: float = math.nan
    d50: Estimate | None = None
    threshold_range: tuple[float, float] | None = None
    underpowered: bool = False

    def holds(self, alpha: float) -> bool:
        if not self.p_holm <= alpha:
            return False
        if self.direction != 0 and (self.effect.value * self.direction <= 0):
            return False
        if self.direction != 0:
            lo_side = self.effect.lo if self.direction > 0 else -self.effect.hi
            if not lo_side > 0:
                return False
        if self.threshold_range is not None:
            lo, hi = self.threshold_range
            if self.d50 is None or not (lo <= self.d50.lo and self.d50.hi <= hi):
                return False
        return True

    def falsified(self) -> bool:
        """The whole CI falls short of ``min_effect`` in the predicted direction (two-sided: on both sides)."""
        e = self.effect
        if math.isnan(e.lo) or math.isnan(e.hi):
            return False
        if self.direction > 0:
            return e.hi < self.min_effect
        if self.direction < 0:
            return e.lo > -self.min_effect
        return -self.min_effect < e.lo and e.hi < self.min_effect


@dataclass
class HypothesisVerdict:
    hypothesis: str
    hypothesis_sha: str
    category: str
    motive: str
    verdict: str
    predictions: list[PredictionResult] = field(default_factory=list)
    pc_effect: float = math.nan
    pc_pass: bool = False
    underpowered: bool = False
    post_hoc: bool = False
    replayed: bool = False

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d["predictions"] = [{**asdict(p), "effect": p.effect.to_dict(),
                             "d50": None if p.d50 is None else p.d50.to_dict()} for p in self.predictions]
        return d


def holm_adjust(results: list[PredictionResult], extra_p: list[float] = ()) -> None:
    """Holm over the predictions of one investigation (plus ``extra_p``: tests that share the family)."""
    ps = [r.p for r in results] + list(extra_p)
    adj = holm(ps) if ps else []
    for r, a in zip(results, adj):
        r.p_holm = a


def judge(h: Hypothesis, results: list[PredictionResult], pc: ArmTest | None, *, alpha: float, delta_pc: float,
          post_hoc: bool = False, replayed: bool = False) -> HypothesisVerdict:
    """The verdict of ``h`` from its (already Holm-adjusted) prediction results and its positive control."""
    pc_pass = pc is not None and positive_control_passes(pc, delta_pc)
    under = any(r.underpowered for r in results)
    if not pc_pass:
        verdict = "insensitive"
    elif results and all(r.holds(alpha) for r in results):
        verdict = "supported"
    elif not under and any(r.falsified() for r in results):
        verdict = "refuted"
    else:
        verdict = "inconclusive"
    return HypothesisVerdict(h.id, h.sha256, h.category, h.motive, verdict, results,
                             pc.diff.value if pc is not None else math.nan, pc_pass, under, post_hoc, replayed)


__all__ = ["ArmTest", "HypothesisVerdict", "PredictionResult", "VERDICTS", "compare", "holm_adjust", "judge",
           "positive_control_passes"]
