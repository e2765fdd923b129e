"""E178 RQ-2: the replacement statistic controls false promotions (simulated paired anchors).

Both judges score the same anchor items. Under the null every challenger has the incumbent's accuracy (0.8); a
fraction ``d`` of items is discordant, split evenly. Per trial the incumbent's right-answer count is drawn once and
each of K challengers is drawn given it, so the K tests of one checkpoint share the incumbent, as in a run. A
checkpoint replaces when any challenger passes the rule: ``mcnemar`` (one-sided exact p < α/K and b > c) or strict
``best_belief`` (a challenger's ε-quantile of Beta(1 + S, 1 + F) above the incumbent's — on a shared anchor of
fixed size that is simply "more items right", so it has no margin: pitfall B1 of docs/methods/red_queen.md).

Claims [R]: the McNemar rule's false-replacement rate ≤ 0.05 per checkpoint in every (K ∈ {1, 4}, anchor 150 or
300, discordance 6–15 %) cell (the worst cell is judged, Wilson CI); its power ≥ 0.9 for a +10-point challenger on
200 items at 12 % discordance (K = 4, α/4). Best-belief's null rates are reported (≈ 0.45 at K = 1, ≈ 0.9 at K = 4
[D] expected).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, mcnemar_counts, proportion_estimate
from agentmill.experiments.e178_red_queen import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    trials: int = 4000
    """Simulated checkpoints per cell (quick 4,000; full 20,000)."""
    accuracy: float = 0.8
    """Accuracy of the incumbent (and of every null challenger)."""
    anchors: tuple[int, ...] = (150, 300)
    discordance: tuple[float, ...] = (0.06, 0.10, 0.15)
    ks: tuple[int, ...] = (1, 4)
    alpha: float = 0.05
    bb_epsilon: float = 0.05
    power_n: int = 200
    power_discordance: float = 0.12
    power_gain: float = 0.10
    power_k: int = 4
    seed: int = 0


SETUPS = {"smoke": Setup(trials=300), "quick": Setup(), "full": Setup(trials=20000)}

CLAIMS = (
    Claim("RQ-2a", "With equal-accuracy challengers, the paired exact McNemar rule at α/K replaces the incumbent at "
          "≤ 5 % of checkpoints in every cell (K ∈ {1, 4}, anchors of 150 and 300 items, 6–15 % discordance).",
          "[R] project replacement rule (docs/methods/red_queen.md)", "strict best-belief ≈ 0.45 (K=1), ≈ 0.9 (K=4) [D]",
          "mcnemar_null_worst", "<=", 0.05),
    Claim("RQ-2b", "The McNemar rule detects a +10-point challenger on 200 anchor items at 12 % discordance (K = 4).",
          "[R] project replacement rule", "—", "mcnemar_power_10pt", ">=", 0.9),
)


def simulate(n: int, d: float, k: int, trials: int, rng: np.random.Generator, *, acc_inc: float = 0.8,
             gain: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, b, c): incumbent right count (trials,), and per challenger b = only-challenger-right, c =
    only-incumbent-right, shape (trials, k). Discordance d splits into b-rate (d + gain)/2, c-rate (d − gain)/2."""
    pb, pc = (d + gain) / 2, (d - gain) / 2
    if pc < 0:
        raise ValueError(f"gain {gain} exceeds discordance {d}")
    m = rng.binomial(n, acc_inc, trials)
    c = rng.binomial(np.repeat(m[:, None], k, 1), pc / acc_inc)
    b = rng.binomial(np.repeat((n - m)[:, None], k, 1), pb / (1 - acc_inc))
    return m, b, c


def decide(n: int, m: np.ndarray, b: np.ndarray, c: np.ndarray, *, alpha: float, eps: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(mcnemar replaced, best_belief replaced), bool (trials,)."""
    from scipy.special import betaincinv

    k = b.shape[1]
    p = mcnemar_counts(b, c, alternative="greater")
    mc = ((p < alpha / k) & (b > c)).any(1)
    s_inc = m
    s_ch = m[:, None] - c + b
    bb_inc = betaincinv(1 + s_inc, 1 + n - s_inc, eps)
    bb_ch = betaincinv(1 + s_ch, 1 + n - s_ch, eps)
    bb = (bb_ch > bb_inc[:, None]).any(1)
    return mc, bb


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    cells = []
    for n, d, k in itertools.product(s.anchors, s.discordance, s.ks):
        m, b, c = simulate(n, d, k, s.trials, rng_for(s.seed, "rq2", n, d, k), acc_inc=s.accuracy)
        mc, bb = decide(n, m, b, c, alpha=s.alpha, eps=s.bb_epsilon)
        cells.append({"n": n, "d": d, "k": k, "mcnemar": int(mc.sum()), "best_belief": int(bb.sum()),
                      "trials": s.trials})
    ctx.progress("null cells", len(cells), len(cells))
    powers = {}
    for k in sorted({1, s.power_k}):
        m, b, c = simulate(s.power_n, s.power_discordance, k, s.trials, rng_for(s.seed, "rq2power", k),
                           acc_inc=s.accuracy, gain=s.power_gain)
        mc, bb = decide(s.power_n, m, b, c, alpha=s.alpha, eps=s.bb_epsilon)
        powers[k] = {"mcnemar": int(mc.sum()), "best_belief": int(bb.sum())}
    worst = max(cells, key=lambda r: r["mcnemar"])
    out: dict[str, Estimate] = {
        "mcnemar_null_worst": proportion_estimate(worst["mcnemar"], s.trials),
        "mcnemar_power_10pt": proportion_estimate(powers[s.power_k]["mcnemar"], s.trials),
        "mcnemar_power_10pt_k1": proportion_estimate(powers[1]["mcnemar"], s.trials),
        "bb_power_10pt": proportion_estimate(powers[s.power_k]["best_belief"], s.trials),
    }
    for k in s.ks:
        sel = [r for r in cells if r["k"] == k]
        out[f"bb_null_k{k}"] = proportion_estimate(sum(r["best_belief"] for r in sel), s.trials * len(sel))
        out[f"mcnemar_null_k{k}"] = proportion_estimate(sum(r["mcnemar"] for r in sel), s.trials * len(sel))
    ctx.data.update({"cells": cells, "power": {str(k): v for k, v in powers.items()}, "worst_cell": worst,
                     "trials": s.trials})
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    cells = data["cells"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels = [f"n={r['n']}\nd={r['d']:g}\nK={r['k']}" for r in cells]
    x = np.arange(len(cells))
    ax.bar(x - 0.2, [r["best_belief"] / r["trials"] for r in cells], 0.4, label="strict best-belief")
    ax.bar(x + 0.2, [r["mcnemar"] / r["trials"] for r in cells], 0.4, label="McNemar at α/K")
    ax.axhline(0.05, color="k", ls="--", lw=0.8)
    ax.set_xticks(x, labels, fontsize=6)
    ax.set_ylabel("false-replacement rate")
    ax.set_title("Equal-accuracy challengers: how often the incumbent is replaced")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "rq2_null_rates.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e178.statistic",
    title="E178 Red Queen: the replacement statistic controls false promotions",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_budget_s=5,
    parallel_safe=True,
    scale_note="numpy simulation of paired anchor outcomes (no search, no model); 4,000 (quick) / 20,000 (full) "
               "checkpoints per cell; the worst of 12 null cells is judged.",
)
