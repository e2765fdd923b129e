"""The three-regime map: over a grid of verification costs, which kind of policy is best.

Regime rule [R] for one cost cell, with "ties" meaning within ``tie`` (0.5 % of R for exact utilities):
"none" if nothing beats giving up (the best policy ties the give-up utility, −c_gen once the first candidate is
paid); else **A** if always_verify ties the best policy (verify everything); else **B** if some single gate(k) ties
the best and beats always_verify (gate on one critic); else **C** (only Bayesian control is best).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.bayes_ship.baselines import all_pipelines, paper_baselines
from agentmill.methods.bayes_ship.config import BayesShipConfig, Calibration, CostModel
from agentmill.methods.bayes_ship.core import DPController, GreedyController
from agentmill.methods.bayes_ship.synthetic import SyntheticWorld, exact_evaluate

BAYES = ("bayes_dp", "bayes_greedy")


def label_cell(u: Mapping[str, float], give_up: float, tie: float) -> str:
    """The regime of one cell from exact utilities ``u`` (policy name → utility; Bayesian and paper baselines)."""
    best = max(u.values())
    if best - give_up <= tie:
        return "none"
    if "always_verify" in u and best - u["always_verify"] <= tie:
        return "A"
    gates = [n for n in u if n.startswith("gate(")]
    if any(best - u[g] <= tie and u[g] > u.get("always_verify", -np.inf) for g in gates):
        return "B"
    bayes = [n for n in u if n.startswith("bayes")]
    if not bayes or any(best - u[n] <= tie for n in bayes):
        return "C"
    return "baseline"  # a baseline other than always_verify or a gate is best: not one of the three regimes


@dataclass
class RegimeCell:
    theta: float
    c_ver: float
    utilities: dict[str, float]
    label: str
    best: str
    best_baseline: str
    best_pipeline: str
    critic_calls: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def bayes_minus_best_baseline(self) -> float:
        return self.utilities["bayes_dp"] - self.utilities[self.best_baseline]

    @property
    def bayes_minus_always_verify(self) -> float:
        return self.utilities["bayes_dp"] - self.utilities["always_verify"]


@dataclass
class RegimeMap:
    world: str
    cells: list[RegimeCell]
    R: float

    def labels(self) -> list[str]:
        return [c.label for c in self.cells]

    def longest_run(self, label: str) -> int:
        best = cur = 0
        for lab in self.labels():
            cur = cur + 1 if lab == label else 0
            best = max(best, cur)
        return best

    def to_text(self) -> str:
        lines = [f"regime map {self.world} (R = {self.R:g}; A verify all, B gate on one critic, C Bayesian, "
                 f"none nothing pays)", f"{'θ=c_ver/R':>10} {'c_ver':>8}  regime  best            bayes_dp  "
                 f"best baseline (utility)"]
        for c in self.cells:
            lines.append(f"{c.theta:>10.3f} {c.c_ver:>8.3g}  {c.label:<6}  {c.best:<15} {c.utilities['bayes_dp']:>8.2f}"
                         f"  {c.best_baseline} ({c.utilities[c.best_baseline]:.2f})")
        return "\n".join(lines)

    def to_html(self) -> str:
        colors = {"A": "#cde", "B": "#dec", "C": "#fdb", "none": "#eee", "baseline": "#f99"}
        rows = "".join(f"<tr style='background:{colors[c.label]}'><td>{c.theta:.3f}</td><td>{c.c_ver:.3g}</td>"
                       f"<td>{c.label}</td><td>{c.best}</td><td>{c.utilities['bayes_dp']:.2f}</td>"
                       f"<td>{c.best_baseline}</td><td>{c.utilities[c.best_baseline]:.2f}</td></tr>"
                       for c in self.cells)
        return (f"<table><caption>regime map {self.world}</caption><tr><th>θ</th><th>c_ver</th><th>regime</th>"
                f"<th>best</th><th>bayes_dp</th><th>best baseline</th><th>its utility</th></tr>{rows}</table>")


def theta_grid(lo: float = 0.02, hi: float = 1.5, n: int = 40) -> np.ndarray:
    """θ = c_ver/R on ``n`` log-spaced points in [lo, hi] [R]."""
    return np.geomspace(lo, hi, n)


def regime_map(world: SyntheticWorld, *, thetas: Sequence[float] | None = None, R: float = 100.0,
               calib: Calibration | None = None, cfg: BayesShipConfig = BayesShipConfig(),
               tie_frac: float = 0.005, pipelines: bool = True,
               extra: Callable[[CostModel], Sequence[Any]] | None = None) -> RegimeMap:
    """Exact regime map of a synthetic world. The Bayesian controllers use ``calib`` (default: the world's true
    parameters); every policy is evaluated exactly under the true model."""
    thetas = theta_grid() if thetas is None else thetas
    calib = calib or world.calibration()
    names = list(world.critics)
    cells = []
    from dataclasses import replace

    cfg = replace(cfg, max_candidates=world.max_candidates)
    for th in thetas:
        cost = world.cost(float(th) * R, R=R)
        pols = [DPController(calib, cost, replace(cfg, controller="dp")),
                GreedyController(calib, cost, replace(cfg, controller="greedy"))]
        base = paper_baselines(names, world.max_candidates)
        pipes = all_pipelines(names, world.max_candidates) if pipelines else []
        u, calls = {}, {}
        for p in pols + base + (list(extra(cost)) if extra else []):
            ev = exact_evaluate(p, world, cost, verify_terminal=cfg.verify_terminal)
            u[p.name], calls[p.name] = ev.utility, dict(ev.critic_calls)
        pu = {p.name: exact_evaluate(p, world, cost).utility for p in pipes}
        give = -cost.c_gen
        label = label_cell({k: v for k, v in u.items()}, give, tie_frac * R)
        base_names = [p.name for p in base]
        cell = RegimeCell(float(th), float(th) * R, u, label, max(u, key=u.get),
                          max(base_names, key=lambda n: u[n]), max(pu, key=pu.get) if pu else "", calls)
        if pu:
            cell.utilities["best_pipeline"] = pu[cell.best_pipeline]
        cells.append(cell)
    return RegimeMap(world.name, cells, R)
