"""E172 CT-1: the adaptive z-test threshold, exactly.

Checks every value pinned in docs/methods/cliff_tokens.md (the 65 × 65 table's 1,283 cliff cells, z = 1.645 vs
Φ⁻¹(0.95), the minimum detectable drops, the (32,16)/(32,17) pair, exact null false-positive rates, the size at
the H0 boundary, the power values) to 10⁻⁴ (rates to 10⁻³ where the docs give three digits), the claim's bounds (null
FP ≤ 0.30 % for V ∈ [0.05, 0.95]; boundary size ∈ [0.04, 0.06] for V_{t−1} ∈ [0.2, 0.9]) and a Monte Carlo of the
null FP rate against the exact value (within 3 SE). Numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    n: int = 64
    """Continuations per potential (the paper's 64)."""
    sim_draws: int = 100_000
    """Monte Carlo pairs per simulated null FP rate."""
    sim_values: tuple[float, ...] = (0.3, 0.5, 0.7)
    """Constant potentials simulated."""
    seed: int = 0


SETUPS = {"smoke": Setup(sim_draws=5_000, sim_values=(0.5,)), "quick": Setup(sim_draws=50_000),
          "full": Setup(sim_draws=400_000, sim_values=(0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9))}

CLAIMS = (
    Claim("E172-CT1", "The cliff test is the paper's one-sided unpooled two-proportion z-test with margin 0.1 at "
          "z = 1.645, n = 64, and its exact properties hold: every pinned table value, null FP ≤ 0.30 %, boundary "
          "size in [0.04, 0.06], simulation within 3 SE (share of checks passed).",
          "[P] rule (cliff_threshold.py); [D] properties", "rule only", "ct1_checks_passed", ">=", 1.0,
          judge_on="exact", exact_why="a fixed battery of closed-form checks plus seeded simulations each tested "
          "against its own 3-SE band; one failed check refutes the claim"),
)

# (k_prev, smallest flagged drop, largest V̂_t that still counts) at n = 64 [D]
MIN_DETECTABLE = {12: (0.1875, 0.0), 16: (0.203, 0.047), 24: (0.234, 0.141), 32: (0.250, 0.250),
                  48: (0.250, 0.500), 56: (0.234, 0.641), 64: (0.1875, 0.8125)}
NULL_FP = {0.1: 0.00019, 0.9: 0.00019, 0.2: 0.00115, 0.8: 0.00115, 0.3: 0.00230, 0.7: 0.00230, 0.5: 0.00296}
POWER = {(0.5, 0.2): 0.795, (0.6, 0.3): 0.757, (0.8, 0.4): 0.977, (0.4, 0.1): 0.868, (0.3, 0.0): 0.985,
         (0.5, 0.0): 1.000}


def checks(s: Setup) -> tuple[list[tuple[str, bool, float]], dict[str, Any]]:
    from agentmill.methods.cliff_tokens.ztest import (CliffTest, cliff_matrix, is_cliff, min_detectable,
                                                      null_fp_rate, power)

    out: list[tuple[str, bool, float]] = []
    m = cliff_matrix(s.n)
    out.append(("1,283 cliff cells at n = 64", int(m.sum()) == 1283, float(m.sum())))
    same = bool((cliff_matrix(s.n, CliffTest(z=1.6448536269514722)) == m).all())
    out.append(("z = 1.645 and Φ⁻¹(0.95) give the same table", same, float(same)))
    md = {kp: (d, v) for kp, d, v in min_detectable(s.n)}
    out.append(("smallest k_prev with a cliff is 12", min(md) == 12, float(min(md))))
    for kp, (d, v) in MIN_DETECTABLE.items():
        ok = abs(md[kp][0] - d) <= 5e-4 and abs(md[kp][1] - v) <= 5e-4
        out.append((f"k_prev={kp}: min drop {d}, max V̂_t {v}", ok, md[kp][0]))
    out.append(("(32,16) is a cliff", bool(is_cliff(32, 64, 16, 64)), 1.0))
    out.append(("(32,17) is not", not is_cliff(32, 64, 17, 64), 0.0))
    for v, fp in NULL_FP.items():
        got = null_fp_rate(v, s.n)
        out.append((f"null FP at V={v}: {fp:.3%}", abs(got - fp) <= 5e-6 + 0.01 * fp, got))
    grid = np.round(np.arange(0.05, 0.951, 0.01), 4)
    fps = np.asarray([null_fp_rate(v, s.n) for v in grid])
    out.append(("null FP ≤ 0.30 % for V in [0.05, 0.95]", float(fps.max()) <= 0.0030, float(fps.max())))
    tails = [null_fp_rate(v, s.n) for v in (0.01, 0.03, 0.05, 0.95, 0.97, 0.99)]
    out.append(("null FP < 1e-5 at V ≤ 0.05 or ≥ 0.95", max(tails) < 1e-5, max(tails)))
    bgrid = np.round(np.arange(0.2, 0.901, 0.05), 4)
    sizes = np.asarray([power(v, v - 0.1, s.n) for v in bgrid])
    out.append(("boundary size in [0.04, 0.06] for V_prev in [0.2, 0.9]",
                bool(sizes.min() >= 0.04 and sizes.max() <= 0.06), float(sizes.max())))
    s1 = power(1.0, 0.9, s.n)
    out.append(("boundary size 0.024 at V_prev = 1", abs(s1 - 0.024) <= 5e-4, s1))
    for (a, b), pw in POWER.items():
        got = power(a, b, s.n)
        out.append((f"power {a}→{b} = {pw}", abs(got - pw) <= 5e-4, got))
    out.append(("n=512: drop 0.01 flagged < 1e-5", power(0.5, 0.49, 512) < 1e-5, power(0.5, 0.49, 512)))
    out.append(("n=512: drop 0.3 flagged ≈ 1", power(0.5, 0.2, 512) > 0.9999, power(0.5, 0.2, 512)))
    # Monte Carlo of the null FP rate vs the exact value
    rng = np.random.default_rng(s.seed)
    sims = {}
    for v in s.sim_values:
        kp, kc = rng.binomial(s.n, v, s.sim_draws), rng.binomial(s.n, v, s.sim_draws)
        rate = float(np.mean(is_cliff(kp, s.n, kc, s.n)))
        exact = null_fp_rate(v, s.n)
        se = np.sqrt(exact * (1 - exact) / s.sim_draws)
        z = abs(rate - exact) / se
        sims[str(v)] = {"simulated": rate, "exact": exact, "z": z}
        out.append((f"simulated null FP at V={v} within 3 SE", z <= 3, z))
    return out, {"null_fp_grid": {"v": grid.tolist(), "fp": fps.tolist()},
                 "boundary_size": {"v": bgrid.tolist(), "size": sizes.tolist()}, "simulation": sims}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    out, extra = checks(s)
    ctx.data.update({"checks": [{"check": c, "passed": ok, "value": v} for c, ok, v in out], **extra})
    passed = sum(ok for _, ok, _ in out)
    return {"ct1_checks_passed": Estimate.exact(passed / len(out), n=len(out)),
            "ct1_max_null_fp": Estimate.exact(max(extra["null_fp_grid"]["fp"])),
            "ct1_max_boundary_size": Estimate.exact(max(extra["boundary_size"]["size"]))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    g = data["null_fp_grid"]
    a.plot(g["v"], np.asarray(g["fp"]) * 100)
    a.axhline(0.30, color="r", ls="--", lw=0.8)
    a.set_xlabel("constant V")
    a.set_ylabel("null FP per position (%)")
    bs = data["boundary_size"]
    b.plot(bs["v"], bs["size"], "o-")
    b.axhspan(0.04, 0.06, color="g", alpha=0.15)
    b.set_xlabel("V_{t-1} (true drop 0.1)")
    b.set_ylabel("size")
    fig.suptitle("CT-1: exact properties of the cliff test at n = 64")
    fig.tight_layout()
    p = out / "ct1_ztest.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e172.cliff_ztest",
    title="E172 CT-1: the adaptive cliff z-test, exactly (table, null FP, size, power)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="numpy only; the exact binomial sums of the test at the paper's n = 64 (and n = 512) plus a seeded "
               "Monte Carlo; no model.",
    parallel_safe=True,
    quick_budget_s=3,
)
