"""Role protocols and records (spec autocog §6.2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.metrics import TemplateMetric


@dataclass
class PoolView:
    """What roles see: registered theories (id -> theory), slot ids, and the observations so far.

    Each observation is a dict with ``obs_id, design (Design), metric (TemplateMetric), real (float|None),
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
    metric: TemplateMetric
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
