"""E172 CT-5: deterministic cliffs are noise, not drops (oracle).

(a) At every position of every scanned trace whose emitted token is DF-typed (greedy, full entropy ≤ H_b(0.99)),
the exact drop V_{t−1} − V_t is at most 1 − π(x*) and at most 0.01 overall [D]. (b) Every detected cliff is
re-estimated with fresh n = 512 continuations at t−1 and t and re-tested: DF-typed cliffs replicate ≤ 10 % (at least
10 needed, else inconclusive), SO/UC ≥ 80 %. (c) The observed count of DF-typed cliffs against the exact expected
count Σ P(cliff | V_{t−1}, V_t) over the compared DF-typed positions: the exact Poisson 95 % interval of observed /
expected contains 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    traces: int = 5000
    """Oracle traces (the CT-3 scans)."""
    n: int = 64
    """Continuations per potential in the scan."""
    n_fresh: int = 512
    """Continuations per fresh re-estimate in the replication test."""
    judge_df_replication: bool = True
    """Judge CT-5b's DF rate here. Quick's 1,000 traces give about 11 DF-typed cliffs, and even 0 replications in
    fewer than 29 leave the Clopper–Pearson upper bound above 0.10: quick records the rate unjudged."""
    seed: int = 0


SETUPS = {"smoke": Setup(traces=60), "quick": Setup(traces=1000, judge_df_replication=False),
          "full": Setup(traces=5000)}

CLAIMS = (
    Claim("E172-CT5a-bound", "The true drop at a DF-typed token never exceeds 1 − π(x*) (count of violations over "
          "every DF-typed position).", "[D]", "—", "ct5a_bound_violations", "<=", 0.0, judge_on="exact",
          exact_why="exact potentials and exact next-token probabilities of the oracle: a deterministic count"),
    Claim("E172-CT5a-max", "The largest true drop at a DF-typed token is ≤ 0.01.", "[D]", "—",
          "ct5a_max_df_drop", "<=", 0.01, judge_on="exact",
          exact_why="exact potentials of the oracle: a deterministic maximum"),
    Claim("E172-CT5b-DF", "DF-typed cliffs do not replicate with fresh n = 512 continuations (replication rate).",
          "[D] prediction", "paper: DF cliffs are 'confident bias'", "ct5b_df_replication", "<=", 0.10),
    Claim("E172-CT5b-SOUC", "SO/UC-typed cliffs replicate with fresh n = 512 continuations.", "[D] prediction",
          "—", "ct5b_souc_replication", ">=", 0.80, ci_bound=0.0),
    Claim("E172-CT5c", "DF-typed cliffs occur as often as the exact null predicts: the Poisson 95 % CI of "
          "observed / expected contains 1 (1 = contains).", "[D]", "—", "ct5c_ratio_ci_contains_1", ">=", 1.0,
          judge_on="exact", exact_why="the pre-registered test is itself an interval-containment check (exact "
          "Poisson interval of the observed count over the exact expected count); the metric is its outcome"),
)


def poisson_ci(k: int, level: float = 0.95) -> tuple[float, float]:
    from scipy.stats import chi2

    a = 1 - level
    lo = 0.0 if k == 0 else float(chi2.ppf(a / 2, 2 * k) / 2)
    return lo, float(chi2.ppf(1 - a / 2, 2 * k + 2) / 2)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e172_cliff_tokens.scans import oracle_scans
    from agentmill.methods.cliff_tokens.core import chainadd_verifier
    from agentmill.methods.cliff_tokens.planted import ChainAddOracle
    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator
    from agentmill.methods.cliff_tokens.replication import replicate
    from agentmill.methods.cliff_tokens.taxonomy import type_token
    from agentmill.methods.cliff_tokens.ztest import Cliff, power

    recs, secs = oracle_scans(s.traces, s.n, s.seed, progress=lambda i, n: ctx.progress("oracle scans", i, n))
    oracle = ChainAddOracle()
    violations, max_drop, df_positions, expected = 0, 0.0, 0, 0.0
    rep = {"DF": [0, 0], "SOUC": [0, 0], "other": [0, 0]}
    drops = []
    for j, r in enumerate(recs):
        ops, tr, ev = tuple(r["ops"]), r["trace"], r["exact_v"]
        k = np.asarray(r["k"])
        scored = [t for t in range(len(k)) if k[t] >= 0]
        compared = {b for a, b in zip(scored, scored[1:]) if b == a + 1}
        for t in range(1, len(tr) + 1):
            p = oracle.next_token_dist(ops, tr[: t - 1])
            with np.errstate(divide="ignore"):
                logp = np.log(p)
            kind, _rank, _h = type_token(logp, int(tr[t - 1]))
            if kind != "DF":
                continue
            df_positions += 1
            drop = ev[t - 1] - ev[t]
            drops.append(drop)
            violations += drop > 1 - p[int(tr[t - 1])] + 1e-12
            max_drop = max(max_drop, drop)
            if t in compared:
                expected += power(ev[t - 1], ev[t], s.n)
        if r["cliffs"]:
            est = PotentialEstimator(oracle, chainadd_verifier(ops), PotentialConfig(n=s.n, seed=s.seed + 1))
            cl = [Cliff(**c) for c in r["cliffs"]]
            for c, ty, ok in zip(cl, r["types"], replicate(est, r["prompt"], tr, cl, n_fresh=s.n_fresh,
                                                           seed_key=(j,))):
                g = "DF" if ty == "DF" else ("SOUC" if ty in ("SO", "UC") else "other")
                rep[g][0] += ok.replicated
                rep[g][1] += 1
        if j % 200 == 0:
            ctx.progress("CT-5", j, len(recs))
    observed = rep["DF"][1]
    lo, hi = poisson_ci(observed)
    ratio = (observed / expected) if expected > 0 else float("nan")
    contains = float(expected > 0 and lo / expected <= 1.0 <= hi / expected)
    ctx.data.update({"replication": rep, "df_positions": df_positions, "observed_df_cliffs": observed,
                     "expected_df_cliffs": expected, "ratio": ratio,
                     "ratio_ci": [lo / expected, hi / expected] if expected > 0 else None, "scan_seconds": secs,
                     "df_drop_hist": np.histogram(drops, bins=20, range=(0, 0.01))[0].tolist(),
                     "substrate": "chainadd oracle (exact planted policy)"})
    out = {"ct5a_bound_violations": Estimate.exact(violations, n=df_positions),
           "ct5a_max_df_drop": Estimate.exact(max_drop, n=df_positions),
           "ct5c_ratio_ci_contains_1": Estimate.exact(contains, n=observed),
           "ct5c_observed_over_expected": (Estimate(ratio, lo / expected, hi / expected, n=observed,
                                                    method="poisson_exact") if expected > 0
                                           else Estimate.exact(float("nan")))}
    if rep["DF"][1] >= 10 and s.judge_df_replication:
        out["ct5b_df_replication"] = clopper_pearson(*rep["DF"])
    elif rep["DF"][1] >= 10:
        out.update(unjudged({"ct5b_df_replication": clopper_pearson(*rep["DF"])}, ["ct5b_df_replication"],
                            "quick size: too few DF-typed cliffs for a Clopper-Pearson bound below 0.10 even with 0 "
                            "replications (needs >= 29); judged at full (5,000 traces)", ctx.data))
    elif rep["DF"][1]:
        out["ct5b_df_replication_observed"] = clopper_pearson(*rep["DF"])
        ctx.data["ct5b_note"] = f"only {rep['DF'][1]} DF-typed cliffs (< 10): CT-5b DF is inconclusive"
    if rep["SOUC"][1]:
        out["ct5b_souc_replication"] = clopper_pearson(*rep["SOUC"])
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    rep = data["replication"]
    names = [k for k in ("DF", "SOUC", "other") if rep[k][1]]
    ax.bar(names, [rep[k][0] / rep[k][1] for k in names])
    for i, k in enumerate(names):
        ax.text(i, rep[k][0] / rep[k][1] + 0.02, f"{rep[k][0]}/{rep[k][1]}", ha="center", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("replication rate at n = 512")
    ax.set_title(f"CT-5: DF cliffs observed {data['observed_df_cliffs']}, expected {data['expected_df_cliffs']:.1f}")
    fig.tight_layout()
    p = out / "ct5_replication.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e172.cliff_deterministic",
    title="E172 CT-5: deterministic cliffs are noise, not drops (oracle: exact bound, replication, null count)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="planted oracle with a matched policy (no presence penalty); the tiny-model pooled DF count and the "
               "policy-mismatch positive control are not built.",
    parallel_safe=True,
    quick_budget_s=10,
)
