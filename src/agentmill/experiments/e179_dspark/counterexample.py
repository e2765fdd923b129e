"""E179-T3 + NC-1: the paper's App.-A instance — a scheduler that reads the token it admits biases the output.

One request, γ = 2, SPS(1) = 1.0, SPS(2) = 0.5, SPS(3) = 0.45, vocabulary {A, B}; target p = (0.7, 0.3), draft
q = (0.5, 0.5), so c_1 = Σ min(p, q) = 0.8; c_2 = 0.9 after x_1 = A and 0 after x_1 = B (arXiv:2607.05147 App. A).
Verify lengths come from the project's own ``schedule`` (``policies.py``), evaluated for each value of x_1:

* ``retrospective`` (walk without the early stop, best prefix) verifies 2 after A and 0 after B → P(A) = 0.85;
* ``dspark`` (Algorithm 1) stops at Θ_1 = 0.9 < Θ_0 before reading c_2 → P(A) = 0.70;
* ``dspark-async`` sizes capacity from a stale survival vector, which cannot depend on x_1 → P(A) = 0.70.

Exact values by enumeration over x_1 and the acceptance rule; Monte Carlo with vectorised draws of the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

PAPER = "Cheng et al., DSpark, arXiv:2607.05147 (App. A)"
P = np.array([0.7, 0.3])
Q = np.array([0.5, 0.5])
C2 = {0: 0.9, 1: 0.0}                 # c_2 after x_1 = A (0) / B (1)
STALE = np.array([[0.8, 0.36]])       # a survival vector from an earlier round (any value independent of x_1)


@dataclass(frozen=True)
class Setup:
    draws: int = 200_000
    seed: int = 0


SETUPS = {"smoke": Setup(draws=2_000), "quick": Setup(), "full": Setup(draws=1_000_000)}

CLAIMS = (
    Claim("E179-T3a", "Retrospective search on the App.-A instance is biased: exact P(first token = A).",
          "[P] DSpark App. A", "0.85", "t3_exact_retrospective", "in", 0.85 - 1e-12, upper=0.85 + 1e-12,
          judge_on="exact",
          exact_why="an exact probability by enumeration of the App. A instance: no sampling"),
    Claim("E179-T3b", "Early stop (Algorithm 1) is exact: P(A).", "[P] DSpark App. A", "0.70", "t3_exact_dspark",
          "in", 0.70 - 1e-12, upper=0.70 + 1e-12, judge_on="exact",
          exact_why="an exact probability by enumeration of the App. A instance: no sampling"),
    Claim("E179-T3c", "Stale capacity (dspark-async) is exact: P(A).", "[P] DSpark §5.2", "0.70",
          "t3_exact_async", "in", 0.70 - 1e-12, upper=0.70 + 1e-12, judge_on="exact",
          exact_why="an exact probability by enumeration of the App. A instance: no sampling"),
    Claim("E179-T3d", "Monte Carlo agrees with the exact values: largest |MC − exact| over the three policies.",
          "[R] Monte Carlo tolerance", "±0.005 at 200k draws", "t3_mc_max_dev", "<=", 0.005, judge_on="exact",
          exact_why="a seeded Monte Carlo check against the exact values: the 0.005 tolerance is about 5 standard "
                    "errors at 200k draws, so the noise is inside the tolerance"),
    Claim("E179-NC1", "Negative control: retrospective error on App. A exceeds 0.1 (|P(A) − 0.70|).",
          "[R] negative control", "0.15", "nc1_retro_error", ">=", 0.1, judge_on="exact",
          exact_why="an exact probability by enumeration of the App. A instance: no sampling"),
)


def _table() -> Any:
    from agentmill.methods.dspark.costmodel import SPSTable

    return SPSTable([1, 2, 3], [1], [512], {"r=1,ctx=512": [1.0, 2.0, 1 / 0.45]})


def verify_lengths(policy: str) -> dict[int, int]:
    """ℓ chosen by the project's scheduler after each possible first draft token."""
    from agentmill.methods.dspark.policies import schedule

    sps = _table()
    return {x1: int(schedule(np.array([[0.8, C2[x1]]]), [2], sps, policy, stale_survival=STALE)[0])
            for x1 in (0, 1)}


def exact_p_a(ell: dict[int, int]) -> float:
    """P(first committed token = A): ℓ = 0 → z ~ p; ℓ ≥ 1 → accept x_1 w.p. min(1, p/q), else the residual."""
    total = 0.0
    resid = np.maximum(P - Q, 0)
    resid = resid / resid.sum()
    for x1 in (0, 1):
        if ell[x1] == 0:
            pa = P[0]
        else:
            acc = min(1.0, P[x1] / Q[x1])
            pa = acc * (x1 == 0) + (1 - acc) * resid[0]
        total += Q[x1] * pa
    return float(total)


def mc_p_a(ell: dict[int, int], n: int, rng: np.random.Generator) -> float:
    x1 = (rng.random(n) < Q[1]).astype(int)
    u = rng.random(n)
    z = (rng.random(n) < P[1]).astype(int)                      # plain step: z ~ p
    lens = np.where(x1 == 0, ell[0], ell[1])
    accept = u * Q[x1] < P[x1]
    resid = np.maximum(P - Q, 0)
    resid = resid / resid.sum()
    repl = (rng.random(n) < resid[1]).astype(int)
    first = np.where(lens == 0, z, np.where(accept, x1, repl))
    return float((first == 0).mean())


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    rng = np.random.default_rng(s.seed)
    out, rows = {}, {}
    for name, pol in (("retrospective", "retrospective"), ("dspark", "dspark"), ("async", "dspark-async")):
        ell = verify_lengths(pol)
        ex = exact_p_a(ell)
        mc = mc_p_a(ell, s.draws, rng)
        rows[name] = {"lengths_after_A_B": [ell[0], ell[1]], "exact": ex, "mc": mc}
        out[f"t3_exact_{name}"] = Estimate.exact(ex)
    ctx.data["policies"] = rows
    out["t3_mc_max_dev"] = Estimate.exact(max(abs(r["mc"] - r["exact"]) for r in rows.values()), s.draws)
    out["nc1_retro_error"] = Estimate.exact(abs(rows["retrospective"]["exact"] - 0.70))
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()

    rows = data.get("policies")
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = list(rows)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [rows[n]["exact"] for n in names], 0.4, label="exact")
    ax.bar(x + 0.2, [rows[n]["mc"] for n in names], 0.4, label="Monte Carlo")
    ax.axhline(0.70, color="k", ls="--", lw=1, label="target p(A) = 0.70")
    ax.set_xticks(x, names)
    ax.set_ylim(0.5, 0.9)
    ax.set_ylabel("P(first token = A)")
    ax.set_title("E179-T3: the App.-A causality trap")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out_dir / "e179_counterexample.png"
    save(fig, p, dpi=120)
    return [p]


EXPERIMENT = Experiment(
    quick_budget_s=5,
    id="e179.counterexample",
    parallel_safe=True,
    title="DSpark App.-A counterexample: retrospective search is biased, early stop and stale capacity are exact",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="Exact toy instance from the paper; nothing is scaled down.",
    plots=plots,
)
