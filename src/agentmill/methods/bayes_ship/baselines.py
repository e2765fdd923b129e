"""The paper's baseline policies ([C] ``iter/replay_baselines.py``, ``analysis/controller.py``), as objects with
``decide(state) -> Decision`` like the Bayesian controllers, so replay and exact evaluation treat all alike.

None of them reads the belief: they act on which candidate this is and on the outcomes seen on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from agentmill.methods.bayes_ship.core import ControlState, Decision


def _d(action: str, critic: str | None = None, why: str = "") -> Decision:
    return Decision(action, critic, {}, float("nan"), why or action)  # type: ignore[arg-type]


@dataclass(frozen=True)
class AlwaysVerify:
    """Verify the first candidate."""

    name: str = "always_verify"
    reads_belief = False

    def decide(self, s: ControlState) -> Decision:
        return _d("verify")


@dataclass(frozen=True)
class GiveUp:
    """Do nothing: the reference a policy must beat to pay at all."""

    name: str = "give_up"
    reads_belief = False

    def decide(self, s: ControlState) -> Decision:
        return _d("give_up")


@dataclass(frozen=True)
class BestOfN:
    """Generate until the n-th candidate (capped by the episode's max), verify it ([C] best_of_N, N = 3)."""

    n: int = 3
    name: str = "best_of_3"
    reads_belief = False

    def decide(self, s: ControlState) -> Decision:
        if s.candidates < min(self.n, s.max_candidates):
            return _d("generate")
        return _d("verify")


@dataclass(frozen=True)
class Gate:
    """Run critic k; pass → verify; fail → generate while candidates remain, else give up ([C] threshold_Lk)."""

    critic: str
    max_candidates: int = 5
    name: str = ""
    reads_belief = False

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", f"gate({self.critic})")

    def decide(self, s: ControlState) -> Decision:
        seen = dict(s.outcomes)
        if self.critic not in seen:
            return _d("critic", self.critic)
        if seen[self.critic]:
            return _d("verify")
        if s.candidates < min(self.max_candidates, s.max_candidates):
            return _d("generate")
        return _d("give_up")


@dataclass(frozen=True)
class FixedPipeline:
    """Run the critics in order; all pass → verify; the first fail → generate while candidates remain, else give
    up ([C] fixed_pipeline, L0 then L3)."""

    critics: tuple[str, ...] = ("L0", "L3")
    max_candidates: int = 5
    name: str = ""
    reads_belief = False

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", "pipeline(" + ",".join(self.critics) + ")")

    def decide(self, s: ControlState) -> Decision:
        seen = dict(s.outcomes)
        for k in self.critics:
            if k not in seen:
                return _d("critic", k)
            if not seen[k]:
                if s.candidates < min(self.max_candidates, s.max_candidates):
                    return _d("generate")
                return _d("give_up")
        return _d("verify")


def always_verify() -> AlwaysVerify:
    return AlwaysVerify()


def give_up() -> GiveUp:
    return GiveUp()


def best_of_n(n: int = 3) -> BestOfN:
    return BestOfN(n, f"best_of_{n}")


def gate(critic: str, max_candidates: int = 5) -> Gate:
    return Gate(critic, max_candidates)


def fixed_pipeline(critics: Sequence[str] = ("L0", "L3"), max_candidates: int = 5) -> FixedPipeline:
    return FixedPipeline(tuple(critics), max_candidates)


def refine_then_verify(k: int = 1) -> BestOfN:
    """k refinement steps, then verify the last ([C] self_refine / reflexion replayed from cached trajectories).
    Under agentmill's kernel model a refinement is a ``generate``, so this is best-of-(k + 1) by another name."""
    return BestOfN(k + 1, f"refine_then_verify({k})")


def paper_baselines(critics: Sequence[str], max_candidates: int = 5) -> list:
    """always_verify, best_of_3, gate(k) for each of L0/L2/L3 present, pipeline(L0, L3) if both present,
    refine_then_verify(1) — the paper's set, restricted to the critics a world has."""
    out: list = [always_verify(), best_of_n(3)]
    out += [gate(k, max_candidates) for k in ("L0", "L2", "L3") if k in critics]
    if "L0" in critics and "L3" in critics:
        out.append(fixed_pipeline(("L0", "L3"), max_candidates))
    out.append(refine_then_verify(1))
    return out


def all_pipelines(critics: Sequence[str], max_candidates: int = 5) -> list[FixedPipeline]:
    """Every non-empty subset of critics as a pipeline in the given order (the oracle-tuned rule baseline picks the
    best per cost cell)."""
    return [fixed_pipeline(c, max_candidates) for r in range(1, len(critics) + 1)
            for c in combinations(critics, r)]
