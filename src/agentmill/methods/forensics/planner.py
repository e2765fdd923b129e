"""The arm planner: one shared control, one arm per tested value, the dose grid for numeric predictions, the positive
control, each arm checked for the single-variable rule twice, and N per arm from the two-proportion power formula.

N per arm = ``power_two_prop(p0, p0 ± min_effect)`` at α / m (m = the number of tests of the investigation: Holm's
first step, so the plan is powered for the strictest comparison) and power 0.8, capped so that all arms fit the
episode budget. An arm whose cap leaves its minimum detectable effect above the predicted one is marked
``underpowered`` *before* it runs; such an arm can never make its hypothesis ``refuted``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.stats import mde_two_prop, power_two_prop
from agentmill.methods.forensics.envs import EnvSpec
from agentmill.methods.forensics.hypotheses import Hypothesis
from agentmill.methods.forensics.variables import Arm, Intervention, changed_variable, check_span_locality


@dataclass
class PlannedArm:
    arm: Arm
    n: int
    required: int
    underpowered: bool
    hypotheses: list[str] = field(default_factory=list)


@dataclass
class Plan:
    control: PlannedArm
    arms: list[PlannedArm]
    m_tests: int
    p0: float

    @property
    def episodes(self) -> int:
        return self.control.n + sum(a.n for a in self.arms)

    def arm(self, variable: str, value: Any) -> PlannedArm:
        for a in self.arms:
            iv = a.arm.intervention
            if iv is not None and iv.variable == variable and iv.value == value:
                return a
        raise KeyError(f"no arm {variable}={value!r} in the plan")


def check_arm(env: EnvSpec, control: Mapping[str, Any], arm: Arm) -> str:
    """Both single-variable checks for ``arm`` against ``control``; returns the changed variable."""
    var = changed_variable(control, arm.values)
    check_span_locality(env.render(control), env.render(arm.values), var)
    return var


def _values_for(h: Hypothesis, env: EnvSpec) -> list[tuple[str, Any, float, int]]:
    out = []
    for p in h.predictions:
        if p.value == "dose":
            # the grid's low doses carry the predicted change relative to the incident's (high) dose
            out += [(p.variable, d, p.min_effect, -p.direction) for d in env.variable(p.variable).domain]
        else:
            out.append((p.variable, p.value, p.min_effect, p.direction))
    return out


def plan(hyps: Sequence[Hypothesis], env: EnvSpec, control: Mapping[str, Any], *, p0: float, budget: int,
         alpha: float = 0.05, power: float = 0.8, min_n: int = 10) -> Plan:
    """Plan the arms of ``hyps`` (with their positive controls) around ``control``, within ``budget`` episodes."""
    wanted: dict[tuple[str, Any], dict[str, Any]] = {}
    m = 0
    for h in hyps:
        for var, val, me, sign in _values_for(h, env):
            if val == control[var]:
                continue  # the control itself (a dose grid includes the incident's dose)
            w = wanted.setdefault((var, repr(val)), {"var": var, "val": val, "me": me, "hyps": [], "pc": False,
                                                     "sign": sign})
            w["me"] = min(w["me"], me)
            if h.id not in w["hyps"]:
                w["hyps"].append(h.id)
        m += len(h.predictions)
        if h.positive_control is not None:
            pc = h.positive_control
            w = wanted.setdefault((pc.variable, repr(pc.value)), {"var": pc.variable, "val": pc.value, "me": 0.2,
                                                                   "hyps": [], "pc": True, "sign": 0})
            w["pc"] = True
            if h.id not in w["hyps"]:
                w["hyps"].append(h.id)
    m = max(m, 1)
    n_arms = len(wanted) + 1
    cap = max(min_n, budget // n_arms)
    arms = []
    for (var, _), w in wanted.items():
        arm = Arm(f"{var}={w['val']!r}", tuple(sorted(control.items())), Intervention(var, w["val"]),
                  "positive_control" if w["pc"] else ("dose" if env.variable(var).kind == "numeric" else "test"))
        check_arm(env, control, arm)
        me = w["me"]
        sign = w["sign"] or (-1 if p0 >= 0.5 else 1)  # two-sided: plan on the side with room
        if (sign < 0 and p0 - me < 0) or (sign > 0 and p0 + me > 1):
            sign = -sign
        p2 = min(1.0, max(0.0, p0 + sign * me))
        req = power_two_prop(p0, p2, alpha=alpha / m, power=power) if p2 != p0 else cap
        n = min(req, cap)
        mde = mde_two_prop(p0, n, alpha=alpha / m, power=power, direction=sign)
        arms.append(PlannedArm(arm, n, req, mde > me, list(w["hyps"])))
    n_ctl = max((a.n for a in arms), default=cap)
    ctl = PlannedArm(Arm("control", tuple(sorted(control.items())), None, "control"), n_ctl, n_ctl, False, [])
    return Plan(ctl, arms, m, p0)


__all__ = ["Plan", "PlannedArm", "check_arm", "plan"]
