"""Role protocols and records [R]: Advocate, Arbiter, Reviser, Critic; Proposal, Verdict, Critique,
Revision, and the PoolView every role reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.metrics import CodeMetric, TemplateMetric


@dataclass
class PoolView:
    """What roles see: registered theories (id -> theory), slot ids, and the observations so far.

    Each observation is a dict with ``obs_id, design (Design), metric (TemplateMetric|CodeMetric), real (float|None),
    preds ({theory_id: float|None}), round, gate_passed``.
    """

    theories: dict[str, Any]
    slots: list[str]
    observations: list[dict]
    exclude_pairs: frozenset = frozenset()

    def scoring_rows(self) -> list[tuple[float | None, dict]]:
        return [(o["real"], o["preds"]) for o in self.observations]


@dataclass
class Proposal:
    design: Design
    metric: TemplateMetric | CodeMetric
    rationale: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class Verdict:
    kind: str  # "new_model" | "new_theory"
    target_slot: int  # 1 | 2
    interpretation: str = ""
    recommendation: str = ""

    def to_json(self) -> dict:
        return {"kind": self.kind, "target_slot": self.target_slot, "interpretation": self.interpretation,
                "recommendation": self.recommendation}


CRITIC_VERDICTS = ("continue", "regenerate")


@dataclass
class Critique:
    """The critic's answer on one revision candidate ([C] ``src/improver.py``): ``continue`` = good enough, stop the
    inner loop (honoured only for an accepted candidate); ``regenerate`` = try again, with ``critique`` as the
    advice."""

    verdict: str  # "continue" | "regenerate"
    critique: str = ""
    fallback: bool = False
    errors: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.verdict not in CRITIC_VERDICTS:
            raise ValueError(f"Critique.verdict: {self.verdict!r} is not one of {', '.join(CRITIC_VERDICTS)}")

    def to_json(self) -> dict:
        out = {"verdict": self.verdict, "critique": self.critique}
        if self.fallback:
            out.update(fallback=True, errors=list(self.errors))
        return out


@dataclass
class Revision:
    theory: Any
    loss: float
    improved_over_target: bool
    candidates: list[dict] = field(default_factory=list)


class Advocate(Protocol):
    def propose(self, own, opponent, pool: PoolView, rng: np.random.Generator) -> Proposal: ...


class Arbiter(Protocol):
    def judge(self, slot1, slot2, pool: PoolView) -> Verdict: ...


class Reviser(Protocol):
    def revise(self, verdict: Verdict, target, other, pool: PoolView, rng: np.random.Generator) -> Revision: ...


class Critic(Protocol):
    def critique(self, verdict: Verdict, target, candidate, pool: PoolView, attempt: dict,
                 history: list[dict]) -> Critique:
        """Judge ``candidate`` (``attempt``: iteration, name, loss, per-observation errors, accepted, best_loss,
        target_loss) given the earlier iterations' records in ``history``."""
        ...
