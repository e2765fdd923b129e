"""E173 P-1: β·log(π*/π_ref) = A* exactly, stochastic MDPs included (arXiv:2606.26080 [A]).

Setup and thresholds are the project's [R] (docs/methods/progress_advantage.md, Claims and verdicts).

The issue's "exactness check on small KL-regularised MDPs solved exactly". On random 20-state, 4-action MDPs
(deterministic, Dirichlet α = 0.1 and α = 1 transitions) with β ∈ {0.1, 1}:

(a) π* from soft value iteration: max |β·log(π*/π_ref) − A*| < 1e-8 (a sanity check of the solver);
(b) π from soft *policy* iteration, which never runs the soft max, so the check is not circular: < 1e-8;
(c) exact-gradient KL-regularised policy gradient (``methods.progress_advantage.train.kl_pg_exact``) from π_0 = π_ref:
    the max error after K steps falls with K — per (MDP, β) the Spearman correlation of (K, error) over
    K ∈ {0, 50, 100, 200, 400, 1000}; claim: its mean over MDPs ≤ −0.9 (whole bootstrap CI over MDPs).

Also reported, no claim: the same identity through the full LM scorer (``scorer_exactness``: canned token
scorers that *are* π* and π_ref, free-text and candidates modes). This is an algebraic claim: "supported" says the
code is right, nothing about agents (progress_advantage README, Caveats).

Deviation [R]: for (c) each MDP gets a uniform start distribution, because the exact gradient is weighted by the
discounted visitation d^π and a state never reached from state 0 (common with deterministic P) would never train,
so its error could not fall however long one trains (``kl_pg_exact`` docstring). The step size lr = 5 is the one of
the method's unit test, fixed before this experiment ran.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci, spearman
from agentmill.core.tabular_mdp import random_mdp
from agentmill.experiments.e173_progress_advantage import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.progress_advantage.exactness import (MDP_KINDS, exactness_check, kl_pg_identity_curve,
                                                            scorer_exactness)


@dataclass(frozen=True)
class Setup:
    n_mdps: int = 50
    """Random MDPs (50 [R]); MDP i has kind ``kinds[i % 3]`` and seed ``seed + i``."""
    n_states: int = 20
    """States per MDP (20 [R])."""
    n_actions: int = 4
    """Actions per state (4 [R])."""
    gamma: float = 0.9
    """Discount (the ``core.tabular_mdp.random_mdp`` default)."""
    betas: tuple[float, ...] = (0.1, 1.0)
    """KL coefficients (β ∈ {0.1, 1} [R])."""
    kinds: tuple[str, ...] = ("det", "dir0.1", "dir1")
    """Transition families (deterministic and Dirichlet α ∈ {0.1, 1} [R])."""
    kl_pg_mdps: int = 50
    """MDPs (first ones) used for part (c)."""
    kl_pg_steps: tuple[int, ...] = (0, 50, 100, 200, 400, 1000)
    """K at which the KL-PG error is recorded (P-4's pre-registered K grid [R], extended to 1000)."""
    kl_pg_lr: float = 5.0
    """KL-PG step size (the method's unit test value, fixed before any run)."""
    scorer_mdps: int = 6
    """MDPs checked through the full scorer (reported, no claim)."""
    n_boot: int = 2000
    """Bootstrap resamples over MDPs for the part (c) CI."""
    seed: int = 0
    """First MDP seed."""


SETUPS = {
    "smoke": Setup(n_mdps=3, kl_pg_mdps=3, kl_pg_steps=(0, 20, 50), scorer_mdps=1, n_boot=200),
    "quick": Setup(n_mdps=12, kl_pg_mdps=6, kl_pg_steps=(0, 50, 100, 200, 400), scorer_mdps=2),
    "full": Setup(),
}

CLAIMS = (
    Claim("P-1a", "π* from soft value iteration: β·log(π*/π_ref) equals A* = Q* − V* to < 1e-8 on every live valid "
          "(s, a) of every MDP, stochastic ones included.", "[P] abstract, the identity; threshold [R]",
          "exact (theory)", "max_err_vi", "<=", 1e-8, judge_on="exact",
          exact_why="exact dynamic programming on enumerated MDPs, no sampling: a numerical identity checked on every "
                    "live (s, a) to its tolerance"),
    Claim("P-1b", "π from soft policy iteration (independent of the soft max): β·log(π/π_ref) equals A* to < 1e-8.",
          "[P] abstract; threshold [R]", "exact (theory)", "max_err_spi", "<=", 1e-8, judge_on="exact",
          exact_why="exact dynamic programming on enumerated MDPs, no sampling: a numerical identity checked on every "
                    "live (s, a) to its tolerance"),
    Claim("P-1c", "Exact-gradient KL-PG from π_ref: the identity error falls with training steps K (mean over MDPs "
          "of Spearman(K, error) ≤ −0.9, whole 95 % CI).", "[P] 'exact at the KL optimum'; threshold [R]",
          "—", "kl_pg_spearman_mean", "<=", -0.9),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    t0 = time.perf_counter()
    ctx.progress("P-1 a/b", 0, 3)
    rows = exactness_check(s.n_mdps, n_states=s.n_states, n_actions=s.n_actions, gamma=s.gamma, betas=s.betas,
                           kinds=s.kinds, seed=s.seed)
    t_ab = time.perf_counter() - t0
    ctx.progress("P-1 c", 1, 3)
    curves, rhos = [], []
    for i in range(min(s.kl_pg_mdps, s.n_mdps)):
        kind = s.kinds[i % len(s.kinds)]
        det, alpha = MDP_KINDS[kind]
        mdp, ref = random_mdp(s.n_states, s.n_actions, gamma=s.gamma, alpha=alpha, deterministic=det,
                              seed=s.seed + i)
        mdp = dataclasses.replace(mdp, start=np.full(s.n_states, 1.0 / s.n_states))
        for beta in s.betas:
            curve = kl_pg_identity_curve(mdp, ref, beta, steps=max(s.kl_pg_steps), lr=s.kl_pg_lr,
                                         record=s.kl_pg_steps)
            Ks = np.array([c["K"] for c in curve], float)
            errs = np.array([c["err"] for c in curve])
            rho = spearman(Ks, errs)
            rhos.append(rho)
            curves.append({"mdp": i, "kind": kind, "beta": beta, "K": Ks.tolist(), "err": errs.tolist(),
                           "J": [c["J"] for c in curve], "spearman": rho})
    ctx.progress("P-1 scorer", 2, 3)
    scorer_errs = []
    for i in range(s.scorer_mdps):
        kind = s.kinds[i % len(s.kinds)]
        det, alpha = MDP_KINDS[kind]
        mdp, ref = random_mdp(s.n_states, s.n_actions, gamma=s.gamma, alpha=alpha, deterministic=det,
                              seed=s.seed + i)
        for space in ("free_text", "candidates"):
            scorer_errs.append(scorer_exactness(mdp, ref, s.betas[-1], action_space=space, seed=i)["max_err"])
    rho_arr = np.array(rhos)
    n_undef = int(np.isnan(rho_arr).sum())
    ok = rho_arr[~np.isnan(rho_arr)]
    rho_est = (bootstrap_ci(ok, np.mean, n_boot=s.n_boot, seed=s.seed) if ok.size >= 2
               else Estimate.exact(float(ok.mean()) if ok.size else math.nan))
    err_vi = np.array([r["err_vi"] for r in rows])
    err_spi = np.array([r["err_spi"] for r in rows])
    ratio_final = np.array([c["err"][-1] / c["err"][0] for c in curves if c["err"][0] > 0])
    ctx.data["p1"] = {"rows": rows, "curves": curves, "scorer_errs": scorer_errs,
                      "seconds_ab": t_ab, "seconds_total": time.perf_counter() - t0}
    return {
        "max_err_vi": Estimate.exact(float(err_vi.max()), n=err_vi.size),
        "max_err_spi": Estimate.exact(float(err_spi.max()), n=err_spi.size),
        "max_err_value_spi_vs_vi": Estimate.exact(max(r["err_value"] for r in rows), n=len(rows)),
        "kl_pg_spearman_mean": rho_est,
        "kl_pg_spearman_share_le_-0.9": Estimate.exact(float((ok <= -0.9).mean()) if ok.size else math.nan,
                                                       n=ok.size),
        "kl_pg_spearman_undefined": Estimate.exact(n_undef),
        "kl_pg_final_over_initial_err_median": Estimate.exact(float(np.median(ratio_final))
                                                              if ratio_final.size else math.nan),
        "scorer_max_err": Estimate.exact(max(scorer_errs) if scorer_errs else math.nan, n=len(scorer_errs)),
    }


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    p = data["p1"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    for beta, colour in ((0.1, "tab:blue"), (1.0, "tab:orange")):
        cs = [c for c in p["curves"] if abs(c["beta"] - beta) < 1e-12]
        for k, c in enumerate(cs):
            ax.plot(np.maximum(c["K"], 1), c["err"], color=colour, alpha=0.3, lw=0.8,
                    label=f"β = {beta:g}" if k == 0 else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("KL-PG steps K (K = 0 drawn at 1)")
    ax.set_ylabel("max |β log(π_K/π_ref) − A*|")
    ax.set_title("P-1c: identity error along exact-gradient KL-PG")
    ax.legend(fontsize=8)
    ax = axes[1]
    vi = [max(r["err_vi"], 1e-17) for r in p["rows"]]
    spi = [max(r["err_spi"], 1e-17) for r in p["rows"]]
    ax.scatter(range(len(vi)), vi, s=8, label="(a) soft value iteration")
    ax.scatter(range(len(spi)), spi, s=8, marker="x", label="(b) soft policy iteration")
    ax.axhline(1e-8, color="red", ls="--", lw=1, label="threshold 1e-8")
    ax.set_yscale("log")
    ax.set_xlabel("(MDP, β) case")
    ax.set_ylabel("max abs error")
    ax.set_title("P-1a/b: identity error per case")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "p1_exactness.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e173.progress_exactness",
    quick_budget_s=5,
    parallel_safe=True,
    title="E173 P-1: β·log(π*/π_ref) = A* on random KL-regularised MDPs solved exactly",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Algebraic claim [P], checked on code (README caveats): random 20 × 4 MDPs (deterministic, Dirichlet "
               "α = 0.1, 1), γ = 0.9, β ∈ {0.1, 1}, exact solvers in float64; no LM. Part (c) uses a uniform start "
               "distribution [R]. The paper states the identity as a theorem; it has no numeric counterpart.",
)
