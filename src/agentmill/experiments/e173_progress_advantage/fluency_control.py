"""E173 P-5: dividing by π_ref removes fluency (arXiv:2606.26080 [A]; setup and threshold [R]).

A policy's own log-prob rewards what is *fluent* under its pre-training, not what makes progress. When the correct
moves are rare under π_ref (here ≈ 2 % of the reference mass, p ≈ 0.02 [R]) and training is short, log π_K
still ranks fluent no-ops above progress; the progress score β·log(π_K/π_ref) divides the prior out.

Setup: the P-4 world and machinery (``fluency_keydoor``): KeyDoor with trap, exact model; π_ref puts
logit c on no-ops and distractor actions, with c chosen per layout by bisection so that the mean reference mass on
the first moves of shortest plans is 0.02 (a construction of the reference from the oracle plan, not from
outcomes); π_K after K ∈ {0, 10, 25, 50} exact-gradient KL-PG steps (β = 0.1, the P-4 step size); rollouts of π_K;
step labels from the oracle distance.

Claim P-5 (pre-registered at K = 50, the "short KL-PG"): step-error AUROC(progress) − AUROC(log π_K) ≥ 0.15, whole
95 % paired cluster-bootstrap CI (clusters = trajectories). Quick records ``*_observed`` (no verdict [R]).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, auroc, cluster_bootstrap
from agentmill.envs.keydoor import layouts
from agentmill.experiments.e173_progress_advantage import PAPER
from agentmill.experiments.e173_progress_advantage import fluency_keydoor as fk
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged
from agentmill.methods.progress_advantage.train import kl_pg_exact


@dataclass(frozen=True)
class Setup:
    n_layouts: int = 16
    """Calibrated KeyDoor layouts (as P-4)."""
    layout_seed: int = 0
    """First layout seed."""
    rollouts_per_layout: int = 64
    """Rollouts of π_K per layout."""
    beta: float = 0.1
    """KL coefficient (as P-4)."""
    gamma: float = 0.95
    """Discount."""
    target_ref_p: float = 0.02
    """Mean π_ref mass on correct (shortest-plan) moves (P-5 setup [R]: p ≈ 0.02)."""
    Ks: tuple[int, ...] = (0, 10, 25, 50)
    """KL-PG steps graded."""
    verdict_K: int = 50
    """K of the claim (pre-registered: the end of the short run)."""
    lr: float = 20.0
    """KL-PG step size (P-4's, chosen on dev layouts)."""
    n_boot: int = 1000
    """Cluster-bootstrap resamples."""
    judged: bool = True
    """False: the claim metric is recorded as ``*_observed`` (no verdict)."""
    seed: int = 2000
    """Rollout seed."""


SETUPS = {
    "smoke": Setup(n_layouts=1, rollouts_per_layout=32, Ks=(0, 5), verdict_K=5, n_boot=50, judged=False),
    "quick": Setup(n_layouts=6, rollouts_per_layout=32, n_boot=300, judged=False),
    "full": Setup(),
}

CLAIMS = (
    Claim("P-5", "With correct moves rare under π_ref (p ≈ 0.02) and short KL-PG, the progress score beats the raw "
          "policy log-prob at flagging non-progress steps by ≥ 0.15 AUROC (paired, whole 95 % CI).",
          "[P] the ratio removes fluency/prior effects; threshold [R]", "—", "auroc_gap_progress_logprob",
          ">=", 0.15),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    t0 = time.perf_counter()
    g = fk.GraderParams(beta=s.beta, gamma=s.gamma, target_ref_p=s.target_ref_p, mc_k=1)
    tasks = [fk.build_task(lay, g) for lay in layouts(s.n_layouts, seed=s.layout_seed, config=fk.TRAP_WORLD)]
    Ks = tuple(sorted(set(s.Ks) | {s.verdict_K}))
    pols = []
    for i, task in enumerate(tasks):
        ctx.progress("P-5 KL-PG", i, len(tasks))
        tr = kl_pg_exact(task.mdp, task.pi_ref, s.beta, steps=max(Ks), lr=s.lr, record=Ks)
        pol = dict(zip(tr.steps, tr.policies))
        if 0 in pol:
            pol[0] = task.pi_ref.copy()
        pols.append(pol)
    out: dict[str, Estimate] = {}
    curve: dict[str, Any] = {"K": list(Ks), "progress": [], "logprob": [], "gap": [], "gap_ci": [], "success": []}
    for K in Ks:
        ctx.progress("P-5 grading", Ks.index(K), len(Ks))
        rng = np.random.default_rng((s.seed, K))
        pa, lp, lab, traj, succ = [], [], [], [], []
        off = 0
        for task, pol in zip(tasks, pols):
            sim = fk.Sim(task.mdp, pol[K])
            ep = fk.rollouts(task, sim, s.rollouts_per_layout, fk.TRAP_WORLD.max_steps, rng)
            sc, labels, _ = fk.grade_steps(task, pol[K], ep, sim, g, rng)
            pa.append(sc["progress"])
            lp.append(sc["logprob"])
            lab.append(labels)
            traj.append(ep.traj + off)
            succ.append(ep.success)
            off += s.rollouts_per_layout
        pa_, lp_, lab_, traj_ = (np.concatenate(x) for x in (pa, lp, lab, traj))
        known = lab_ >= 0
        err = lab_[known] == 0
        a, b, c = pa_[known], lp_[known], traj_[known]
        nb = s.n_boot if K == s.verdict_K else max(50, s.n_boot // 4)
        gap = cluster_bootstrap(lambda r: auroc(-a[r], err[r]) - auroc(-b[r], err[r]), c, n_boot=nb, seed=s.seed)
        au_pa, au_lp = auroc(-a, err), auroc(-b, err)
        out[f"K{K}_auroc_progress"] = Estimate.exact(au_pa, n=int(known.sum()))
        out[f"K{K}_auroc_logprob"] = Estimate.exact(au_lp, n=int(known.sum()))
        out[f"K{K}_auroc_gap"] = gap
        out[f"K{K}_success_rate"] = Estimate.exact(float(np.concatenate(succ).mean()))
        out[f"K{K}_error_share"] = Estimate.exact(float(err.mean()), n=int(err.size))
        curve["progress"].append(au_pa)
        curve["logprob"].append(au_lp)
        curve["gap"].append(gap.value)
        curve["gap_ci"].append([gap.lo, gap.hi])
        curve["success"].append(float(np.concatenate(succ).mean()))
        if K == s.verdict_K:
            out["auroc_gap_progress_logprob"] = gap
    out["mean_fluency_logit"] = Estimate.exact(float(np.mean([t.fluency_logit for t in tasks])))
    out["mean_ref_plan_mass"] = Estimate.exact(float(np.mean([
        fk.ref_plan_mass(t.mdp.valid, t.fluent, t.plan, t.fluency_logit) for t in tasks])))
    ctx.data["p5"] = curve
    ctx.data["seconds"] = time.perf_counter() - t0
    if not s.judged:
        out = unjudged(out, ("auroc_gap_progress_logprob",), f"{s.n_layouts} layouts × {s.rollouts_per_layout} "
                       "rollouts: too small for a verdict, pre-registered [R] (full: 16 × 64)", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    c = data["p5"]
    Ks = np.array(c["K"], float)
    ci = np.array(c["gap_ci"], float)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(Ks, c["progress"], marker="o", label="progress β·log(π_K/π_ref)")
    ax.plot(Ks, c["logprob"], marker="s", label="log π_K (raw log-prob)")
    ax.plot(Ks, c["gap"], "k--", marker=".", label="gap (95 % cluster CI)")
    ax.fill_between(Ks, ci[:, 0], ci[:, 1], color="k", alpha=0.1)
    ax.axhline(0.15, color="red", ls=":", lw=0.8, label="P-5 threshold on the gap")
    ax.axhline(0.5, color="gray", lw=0.8)
    ax.set_xlabel("KL-PG steps K")
    ax.set_ylabel("step-error AUROC")
    ax.set_title("P-5: dividing by π_ref removes the fluency prior")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "p5_fluency.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e173.progress_fluency_control",
    quick_budget_s=10,
    parallel_safe=True,
    title="E173 P-5: the reference ratio removes fluency from the step grade",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Tabular pair, no LM: KeyDoor with trap, π_ref a fluency prior calibrated to 2 % mass on correct "
               "moves, π_K after ≤ 50 exact-gradient KL-PG steps (β = 0.1) [R]; 16 layouts × 64 rollouts. The "
               "paper's pairs are released LLM checkpoints [P].",
)
