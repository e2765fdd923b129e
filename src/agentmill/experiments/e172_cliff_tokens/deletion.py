"""E172 CT-6: deleting the cliff and resampling "recovers", keeping it does not; but deletion is not causal
evidence (oracle).

For the first cliff of failing oracle traces: delete-and-resample (64 fresh continuations from (q, y_<t)), keep-and-
resample (from (q, y_≤t)), the matched control (delete at a random non-cliff position u of the same trace, or of
another trace, whose V̂_{u−1} is within 0.05 of the cliff's V̂_{t−1}) and ban-and-resample (y_t's first-step
probability set to 0). Metrics: pass@64 of delete (a proportion over cliffs: at n = 64, pass@64 is 1 iff any
continuation is correct; Clopper–Pearson); delete − random-delete pass@64 (equivalence within ±0.02, TOST: the 90 %
Newcombe interval of the difference inside the margins); V̂ lift of ban over keep at SO/UC cliffs. Pass@64 ≈ 1 after
deletion holds by construction [D]; the ban lift is the causal test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, clopper_pearson, mean_estimate, newcombe_diff
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    cliffs: int = 100
    """First cliffs of failing traces studied."""
    traces: int = 5000
    """Oracle scans the cliffs come from (the CT-3 scans)."""
    n: int = 64
    """Continuations per intervention (pass@64)."""
    judge_control: bool = True
    """Judge the ±0.02 equivalence of delete and random-delete (quick's 30 cliffs cannot: recorded unjudged)."""
    seed: int = 0


SETUPS = {"smoke": Setup(cliffs=8, traces=60), "quick": Setup(cliffs=30, traces=1000, judge_control=False),
          "full": Setup(cliffs=100, traces=5000)}

CLAIMS = (
    Claim("E172-CT6-delete", "Deleting the first cliff token and resampling reaches pass@64 ≈ 1 (mean over cliffs).",
          "[P] Cliff-del pass@64 = 1.0 in almost every cell", "1.0", "ct6_delete_pass64", ">=", 0.99, ci_bound=0.0),
    Claim("E172-CT6-control", "Deleting at a random non-cliff position with matched V̂ recovers as much: "
          "delete − random-delete pass@64 within ±0.02 (90 % CI, TOST).", "[D] deletion is replication",
          "—", "ct6_delete_minus_random", "in", -0.02, upper=0.02),
    Claim("E172-CT6-ban", "Banning the cliff token raises the potential at SO/UC cliffs (V̂ lift of ban over keep).",
          "[D] causal test; [R] planted", "—", "ct6_ban_lift", ">=", 0.20, ci_bound=0.0),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e172_cliff_tokens.scans import oracle_scans
    from agentmill.methods.cliff_tokens.core import chainadd_verifier
    from agentmill.methods.cliff_tokens.interventions import (ban_resample, delete_resample, keep_resample,
                                                              pass_at_k)
    from agentmill.methods.cliff_tokens.planted import ChainAddOracle
    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator

    recs, _ = oracle_scans(s.traces, s.n, s.seed, progress=lambda i, n: ctx.progress("oracle scans", i, n))
    oracle, rng = ChainAddOracle(), np.random.default_rng([s.seed, 6])
    # the matched-control pool: every non-cliff position u ≥ 1 of every scan, keyed by V̂_{u−1}
    pool = []
    for j, r in enumerate(recs):
        k, n = np.asarray(r["k"]), np.asarray(r["n"])
        cl = {c["pos"] for c in r["cliffs"]}
        pool += [(j, u, k[u - 1] / n[u - 1]) for u in range(1, len(r["trace"])) if u not in cl and k[u - 1] >= 0]
    pool_v = np.asarray([p[2] for p in pool])
    rows = []
    for j, r in enumerate(recs):
        if len(rows) >= s.cliffs:
            break
        if r["correct"] or not r["cliffs"]:
            continue
        c = r["cliffs"][0]
        ty = r["types"][0]
        est = PotentialEstimator(oracle, chainadd_verifier(r["ops"]), PotentialConfig(n=s.n, seed=s.seed + 6))
        t = c["pos"]
        kd, nd = delete_resample(est, r["prompt"], r["trace"], t, s.n, (j,))
        kk, nk = keep_resample(est, r["prompt"], r["trace"], t, s.n, (j,))
        try:
            kb, nb = ban_resample(est, r["prompt"], r["trace"], t, s.n, (j,))
            ban_v = kb / nb
        except ValueError:  # the cliff token had probability 1 (a noise cliff on a forced token): nothing to ban
            ban_v = None
        v_prev = c["k_prev"] / c["n_prev"]
        cand = np.flatnonzero(np.abs(pool_v - v_prev) <= 0.05)
        ctrl = None
        if cand.size:
            jj, u, _ = pool[int(rng.choice(cand))]
            rr = recs[jj]
            e2 = PotentialEstimator(oracle, chainadd_verifier(rr["ops"]), PotentialConfig(n=s.n, seed=s.seed + 6))
            kr, nr = delete_resample(e2, rr["prompt"], rr["trace"], u, s.n, (jj, 99))
            ctrl = pass_at_k(nr, kr, 64)
        rows.append({"trace": j, "pos": t, "type": ty, "v_prev": v_prev, "v_curr": c["k_curr"] / c["n_curr"],
                     "delete_pass64": pass_at_k(nd, kd, 64), "keep_pass64": pass_at_k(nk, kk, 64),
                     "delete_v": kd / nd, "keep_v": kk / nk, "ban_v": ban_v, "random_pass64": ctrl})
    ctx.data.update({"rows": rows, "substrate": "chainadd oracle (exact planted policy)"})
    # with n = 64 samples pass@64 is 1 iff any continuation is correct: a proportion over cliffs
    d = [r["delete_pass64"] for r in rows]
    paired = [(r["delete_pass64"], r["random_pass64"]) for r in rows if r["random_pass64"] is not None]
    souc = [r["ban_v"] - r["keep_v"] for r in rows if r["type"] in ("SO", "UC") and r["ban_v"] is not None]
    out = {"ct6_delete_pass64": clopper_pearson(int(round(sum(d))), len(d)),
           "ct6_keep_pass64": clopper_pearson(int(round(sum(r["keep_pass64"] for r in rows))), len(rows))}
    if len(paired) >= 2:
        a, b = int(round(sum(p[0] for p in paired))), int(round(sum(p[1] for p in paired)))
        diff = newcombe_diff(a, len(paired), b, len(paired), level=0.90)
        if s.judge_control:
            out["ct6_delete_minus_random"] = diff
        else:
            out.update(unjudged({"ct6_delete_minus_random": diff}, ["ct6_delete_minus_random"],
                                "quick size: a ±0.02 equivalence margin on binary pass@64 needs hundreds of "
                                "cliffs; judged at full", ctx.data))
    if len(souc) >= 2:
        out["ct6_ban_lift"] = mean_estimate(souc)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(5, 3))
    arms = [("delete", "delete_v"), ("keep", "keep_v"), ("ban", "ban_v")]
    ax.boxplot([[r[k] for r in rows if r[k] is not None] for _, k in arms], tick_labels=[a for a, _ in arms])
    ax.set_ylabel("V̂ after the intervention (n = 64)")
    ax.set_title("CT-6: interventions at the first cliff (oracle)")
    fig.tight_layout()
    p = out / "ct6_interventions.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e172.cliff_deletion",
    title="E172 CT-6: delete-and-resample recovers by construction; ban-and-resample is the causal test (oracle)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="first cliffs of failing planted-oracle traces (the tiny model is not built: method README, "
               "deviation 2); the paper's cells are 1–9 cliffs per model × dataset.",
    parallel_safe=True,
    quick_budget_s=3,
)
