"""E170 B-3, B-4, B-7 (synthetic) and the permuted-critics control: exact utilities on worlds with known answers.

Three worlds (R = 100, J = 5; critics as (P(pass | correct), P(pass | wrong)), cost): W-A b₀ = 0.8, c_gen = 20,
L0 (0.9, 0.9) 1, L3 (0.8, 0.45) 5; W-B b₀ = 0.2, c_gen = 5, L0 (0.9, 0.9) 1, L2 (0.85, 0.01) 2 (near-oracle),
L3 (0.8, 0.45) 5; W-C b₀ = 0.2, c_gen = 5, L0 (0.9, 0.9) 1, L2 (0.8, 0.3) 2, L3 (0.8, 0.35) 3, L4 (0.75, 0.3) 2.
Two kernels: IID (a new candidate is a fresh sample) and a measured-style one (P_fix 0.22, P_break 0.16).
θ = c_ver/R on 40 log-spaced points in [0.02, 1.5]. Every policy is evaluated exactly by enumeration.

Regime rule per cell (ties within 0.5 % of R): none if nothing beats giving up; A if always_verify ties the best;
B if a single gate(k) ties the best and beats always_verify; else C (Bayesian control alone is best).

- B-3: the longest contiguous run of A cells in W-A, B cells in W-B, C cells in W-C, minimum over the two kernels.
- B-4: DP − best other policy (greedy, the paper's baselines, every fixed pipeline) over every cell of both kernels
  and J ∈ {3, 5}, plus the DP's grid-error bound R·J·(K+1)/N, minimum over cells. Misspecified controllers (every
  gap moved by ±0.2) and the paper's step-counting horizon (6 steps) are reported without a threshold.
- B-7: in every regime-C cell, (Bayes − always_verify) − (Bayes − best baseline) = best baseline − always_verify.
- Permuted control: critics that carry no signal (P(pass) equal under both labels, at W-C's marginal pass rates):
  exact |Bayes − max(always_verify, give up)| over θ; and a replay check: W-C records whose critic outcomes are
  permuted across candidates, calibrated on one split and replayed on another — the share of episodes in which any
  critic is bought.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e170_bayes_ship import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    n_theta: int = 40
    """θ = c_ver/R points, log-spaced in [0.02, 1.5]."""
    grid: int = 1000
    """DP belief grid N."""
    j_values: tuple[int, ...] = (5, 3)
    """Candidate budgets J for B-4 (the regime maps use the first)."""
    misspec_delta: float = 0.2
    control_instances: int = 2000
    """Permuted-critics replay: instances per split (calibration and evaluation), 5 candidates each."""
    reported_arms: bool = True
    """Run the arms reported without a threshold (misspecified controllers, the step-horizon DP); off at quick."""
    seed: int = 0


SETUPS = {"smoke": Setup(n_theta=6, grid=200, j_values=(3,), control_instances=100),
          "quick": Setup(j_values=(5,), reported_arms=False), "full": Setup(control_instances=10_000)}
"""Quick judges B-4 at J = 5 only (J = 3 as well at full) and skips the arms reported without a threshold, to stay
inside the main job's time."""

_EXACT = "exact expected utilities by enumeration over every outcome (no sampling), on a fixed θ grid"
CLAIMS = (
    Claim("E170-B3-A", "Regime A exists: in W-A (likely-correct candidates, costly regeneration) verifying everything "
          "is best on a contiguous range of verification costs (longest run of A cells, min over both kernels).",
          "[S] three regimes; run schema labels A/B/C [C]", "cheap checking → verify everything",
          "b3_longest_A_in_WA", ">=", 3, judge_on="exact", exact_why=_EXACT),
    Claim("E170-B3-B", "Regime B exists: in W-B (a cheap near-oracle test) gating on that one critic is best on a "
          "contiguous range (longest run of B cells, min over both kernels).", "[S]",
          "one near-oracle test → gate on it", "b3_longest_B_in_WB", ">=", 3, judge_on="exact", exact_why=_EXACT),
    Claim("E170-B3-C", "Regime C exists: in W-C (only imperfect critics) Bayesian control beats every paper baseline "
          "by > 0.5 % of R on a contiguous range (longest run of C cells, min over both kernels).", "[S][P]",
          "expensive verify + imperfect critics → Bayesian", "b3_longest_C_in_WC", ">=", 3, judge_on="exact",
          exact_why=_EXACT),
    Claim("E170-B4", "Under the true model the candidate-staged DP is at least as good as greedy, every paper baseline "
          "and every fixed pipeline, up to its grid error: min over cells of DP − best other + bound.", "[C][D]",
          "DP optimal", "b4_margin", ">=", 0.0, judge_on="exact", exact_why=_EXACT),
    Claim("E170-B7-synth", "The gain over always-verify overstates the gain over the best baseline in every regime-C "
          "cell: min over C cells of (best baseline − always_verify), in utility points (> 0 means overstated).",
          "[S] '+62 over always-verify'; [D]", "+62 (regime C, vs always-verify)", "b7_min_overstatement",
          ">=", 1e-9, judge_on="exact", exact_why=_EXACT),
    Claim("E170-B3-ctrl", "Negative control: with critics that carry no signal, Bayesian control is worth no more than "
          "max(always_verify, give up): max over θ of |difference| in utility points (tie ≤ 0.5).", "[R] control",
          "—", "ctrl_max_abs_gap", "<=", 0.5, judge_on="exact", exact_why=_EXACT),
    Claim("E170-B3-ctrl-replay", "Negative control on records: after permuting critic outcomes across candidates, the "
          "calibrated greedy controller buys a critic in at most 1 % of replayed episodes.", "[R] control", "—",
          "ctrl_share_episodes_buying", "<=", 0.01),
)


def _worlds(s: Setup) -> dict[str, Any]:
    from agentmill.methods.bayes_ship.synthetic import MEASURED_KERNEL, WORLDS

    return {(name, kname): w.with_kernel(k, "" if kname == "iid" else "+kernel")
            for name, w in WORLDS.items() for kname, k in (("iid", None), ("measured", MEASURED_KERNEL))}


def regime_maps(s: Setup, ctx: RunContext) -> dict[str, Any]:
    from agentmill.methods.bayes_ship import BayesShipConfig
    from agentmill.methods.bayes_ship.regimes import regime_map, theta_grid

    thetas = theta_grid(n=s.n_theta)
    cfg = BayesShipConfig(grid=s.grid)
    out: dict[str, Any] = {"thetas": thetas.tolist(), "maps": {}}
    worlds = _worlds(s)
    total = len(worlds) * len(s.j_values)
    done = 0
    for (name, kname), w in worlds.items():
        for J in s.j_values:
            m = regime_map(w.with_candidates(J), thetas=thetas, cfg=cfg)
            K = len(w.critics)
            bound = 100.0 * J * (K + 1) / s.grid
            cells = []
            for c in m.cells:
                others = {k: v for k, v in c.utilities.items() if k != "bayes_dp"}
                best_other = max(others, key=others.get)
                cells.append({"theta": c.theta, "label": c.label, "best": c.best, "utilities": c.utilities,
                              "best_baseline": c.best_baseline, "best_pipeline": c.best_pipeline,
                              "dp_minus_best_other": c.utilities["bayes_dp"] - others[best_other],
                              "best_other": best_other, "grid_bound": bound,
                              "critic_calls_dp": c.critic_calls.get("bayes_dp", {})})
            out["maps"][f"{name}|{kname}|J={J}"] = cells
            done += 1
            ctx.progress("regime maps", done, total)
    return out


def misspecified(s: Setup) -> list[dict[str, Any]]:
    from agentmill.methods.bayes_ship import BayesShipConfig
    from agentmill.methods.bayes_ship.core import DPController, GreedyController
    from agentmill.methods.bayes_ship.regimes import theta_grid
    from agentmill.methods.bayes_ship.synthetic import WORLDS, exact_evaluate, perturb

    rows = []
    for name, w in WORLDS.items():
        for sign in (+1, -1):
            cal = perturb(w.calibration(), s.misspec_delta, [sign])
            for th in theta_grid(n=s.n_theta):
                cost = w.cost(100 * th)
                dp = exact_evaluate(DPController(cal, cost, BayesShipConfig(controller="dp", grid=s.grid)), w, cost)
                gr = exact_evaluate(GreedyController(cal, cost), w, cost)
                rows.append({"world": name, "gap_shift": sign * s.misspec_delta, "theta": float(th),
                             "dp": dp.utility, "greedy": gr.utility})
    return rows


def steps_parity(s: Setup) -> list[dict[str, Any]]:
    """The paper's step-counting DP (horizon 6, every action a step) beside agentmill's candidate-staged DP."""
    from agentmill.methods.bayes_ship import BayesShipConfig
    from agentmill.methods.bayes_ship.baselines import gate
    from agentmill.methods.bayes_ship.core import DPController
    from agentmill.methods.bayes_ship.regimes import theta_grid
    from agentmill.methods.bayes_ship.synthetic import WORLDS, exact_evaluate

    rows = []
    H = 6
    for name, w in WORLDS.items():
        cal = w.calibration()
        for th in theta_grid(n=s.n_theta):
            cost = w.cost(100 * th)
            steps = DPController(cal, cost, BayesShipConfig(controller="dp", grid=s.grid, stages="steps",
                                                            horizon_steps=H))
            u_steps = exact_evaluate(steps, w.with_candidates(H + 1), cost).utility
            u_cand = exact_evaluate(DPController(cal, cost, BayesShipConfig(controller="dp", grid=s.grid)), w,
                                    cost).utility
            row = {"world": name, "theta": float(th), "dp_steps": u_steps, "dp_candidates": u_cand}
            if "L2" in w.critics:
                row["gate(L2)"] = exact_evaluate(gate("L2"), w, cost).utility
            rows.append(row)
    return rows


def control_exact(s: Setup) -> list[dict[str, Any]]:
    from agentmill.methods.bayes_ship import BayesShipConfig
    from agentmill.methods.bayes_ship.baselines import always_verify, give_up
    from agentmill.methods.bayes_ship.core import DPController, GreedyController
    from agentmill.methods.bayes_ship.regimes import theta_grid
    from agentmill.methods.bayes_ship.synthetic import WORLD_C, SyntheticWorld, exact_evaluate

    w = WORLD_C
    flat = {k: (w.prior * p1 + (1 - w.prior) * p0,) * 2 for k, (p1, p0) in w.critics.items()}
    wz = SyntheticWorld("W-C permuted", w.prior, flat, w.critic_costs, w.c_gen, w.max_candidates)
    rows = []
    for th in theta_grid(n=s.n_theta):
        cost = wz.cost(100 * th)
        ref = max(exact_evaluate(always_verify(), wz, cost).utility, exact_evaluate(give_up(), wz, cost).utility)
        dp = exact_evaluate(DPController(wz.calibration(), cost, BayesShipConfig(controller="dp", grid=s.grid)),
                            wz, cost)
        gr = exact_evaluate(GreedyController(wz.calibration(), cost), wz, cost)
        rows.append({"theta": float(th), "reference": ref, "dp": dp.utility, "greedy": gr.utility,
                     "dp_critic_calls": sum(dp.critic_calls.values()),
                     "greedy_critic_calls": sum(gr.critic_calls.values())})
    return rows


def control_replay(s: Setup) -> dict[str, Any]:
    from agentmill.methods.bayes_ship.calibration import calibrate, iid_kernel
    from agentmill.methods.bayes_ship.core import GreedyController
    from agentmill.methods.bayes_ship.replay import CandidateRecord, simulate_policy
    from agentmill.methods.bayes_ship.synthetic import WORLD_C, sample_trajectories

    rng = np.random.default_rng([s.seed, 3])

    def permuted(seed: int) -> list[list[CandidateRecord]]:
        trajs = sample_trajectories(WORLD_C, s.control_instances, seed)
        flat = [r for t in trajs for r in t]
        order = rng.permutation(len(flat))
        out, i = [], 0
        for t in trajs:
            nt = []
            for r in t:
                nt.append(dataclasses.replace(r, critics=flat[order[i]].critics))
                i += 1
            out.append(nt)
        return out

    cal_split, eval_split = permuted(s.seed + 10), permuted(s.seed + 11)
    names = list(WORLD_C.critics)
    cal = iid_kernel(calibrate([r for t in cal_split for r in t], names))
    rows = []
    for th in (0.1, 0.2, 0.3, 0.5):
        cost = WORLD_C.cost(100 * th)
        ctrl = GreedyController(cal, cost)
        bought = sum(any(a.startswith("critic:") for a in simulate_policy(t, ctrl, cost).actions) for t in eval_split)
        rows.append({"theta": th, "episodes": len(eval_split), "buying": bought})
    return {"gaps": {k: c.gap for k, c in cal.critics.items()}, "rows": rows}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the zero-gap critics warn by design
        return _measure(s, ctx)


def _measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    maps = regime_maps(s, ctx)
    J0 = s.j_values[0]
    runs: dict[str, dict[str, int]] = {}
    for (wname, want) in (("W-A", "A"), ("W-B", "B"), ("W-C", "C")):
        runs[wname] = {}
        for kname in ("iid", "measured"):
            labels = [c["label"] for c in maps["maps"][f"{wname}|{kname}|J={J0}"]]
            best = cur = 0
            for lab in labels:
                cur = cur + 1 if lab == want else 0
                best = max(best, cur)
            runs[wname][kname] = best
    margins = [c["dp_minus_best_other"] + c["grid_bound"] for cells in maps["maps"].values() for c in cells]
    raw = [c["dp_minus_best_other"] for cells in maps["maps"].values() for c in cells]
    over = []
    c_cells = 0
    for key, cells in maps["maps"].items():
        if not key.endswith(f"J={J0}"):
            continue
        for c in cells:
            if c["label"] == "C":
                c_cells += 1
                u = c["utilities"]
                over.append({"map": key, "theta": c["theta"], "gain_vs_av": u["bayes_dp"] - u["always_verify"],
                             "gain_vs_best": u["bayes_dp"] - u[c["best_baseline"]],
                             "overstatement": u[c["best_baseline"]] - u["always_verify"],
                             "best_baseline": c["best_baseline"],
                             "gap_to_best_pipeline": u["bayes_dp"] - u.get("best_pipeline", np.nan)})
    ctx.progress("misspecified", 0, 1)
    mis = misspecified(s) if s.reported_arms else []
    par = steps_parity(s) if s.reported_arms else []
    ce = control_exact(s)
    cr = control_replay(s)
    ctx.progress("controls", 1, 1)
    greedy_wins = [r for r in mis if r["greedy"] > r["dp"] + 1e-9]
    ctx.data.update({"maps": maps, "longest_runs": runs, "regime_c_cells": over, "misspecified": mis,
                     "greedy_beats_dp_cells": len(greedy_wins), "steps_parity": par, "control_exact": ce,
                     "control_replay": cr})
    n_cells = len(margins)
    bought = max(r["buying"] for r in cr["rows"])
    n_ep = cr["rows"][0]["episodes"]
    return {"b3_longest_A_in_WA": Estimate.exact(min(runs["W-A"].values()), n=s.n_theta),
            "b3_longest_B_in_WB": Estimate.exact(min(runs["W-B"].values()), n=s.n_theta),
            "b3_longest_C_in_WC": Estimate.exact(min(runs["W-C"].values()), n=s.n_theta),
            "b4_margin": Estimate.exact(min(margins), n=n_cells),
            "b4_dp_minus_best_other_min": Estimate.exact(min(raw), n=n_cells),
            **({"b4_misspecified_cells_greedy_beats_dp": Estimate.exact(len(greedy_wins), n=len(mis)),
                "b4_steps_minus_candidates_min": Estimate.exact(min(r["dp_steps"] - r["dp_candidates"] for r in par),
                                                                n=len(par))} if s.reported_arms else {}),
            "b7_min_overstatement": Estimate.exact(min((o["overstatement"] for o in over), default=float("nan")),
                                                   n=c_cells),
            "b7_max_gain_vs_av": Estimate.exact(max((o["gain_vs_av"] for o in over), default=float("nan")),
                                                n=c_cells),
            "b3_max_gap_to_best_pipeline_in_C": Estimate.exact(
                max((o["gap_to_best_pipeline"] for o in over), default=float("nan")), n=c_cells),
            "ctrl_max_abs_gap": Estimate.exact(max(max(abs(r["dp"] - r["reference"]), abs(r["greedy"] - r["reference"]))
                                                   for r in ce), n=len(ce)),
            "ctrl_share_episodes_buying": proportion_estimate(bought, n_ep)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    maps = data["maps"]["maps"]
    th = np.array(data["maps"]["thetas"])
    keys = [k for k in maps if k.endswith("J=5")] or list(maps)
    colors = {"A": "tab:blue", "B": "tab:green", "C": "tab:orange", "none": "lightgrey", "baseline": "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(keys) + 1.4))
    for i, k in enumerate(keys):
        labs = [c["label"] for c in maps[k]]
        ax.scatter(th, [i] * len(th), c=[colors[lab] for lab in labs], marker="s", s=60)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([k.replace("|", " ") for k in keys], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("θ = c_ver / R")
    for lab, col in colors.items():
        ax.scatter([], [], c=col, marker="s", label=lab)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, 1.25))
    ax.set_title("B-3 regime map (A verify all, B gate, C Bayesian, none: nothing pays)", fontsize=9, pad=28)
    fig.tight_layout()
    p1 = out / "b3_regime_map.png"
    save(fig, p1)
    k = next((k for k in keys if k.startswith("W-C|iid")), keys[0])
    fig, ax = plt.subplots(figsize=(7, 4))
    names = [n for n in maps[k][0]["utilities"] if n not in ("best_pipeline",)]
    for n in names:
        ax.plot(th, [c["utilities"][n] for c in maps[k]], lw=2 if n.startswith("bayes") else 1, label=n)
    ax.set_xscale("log")
    ax.set_xlabel("θ = c_ver / R")
    ax.set_ylabel("exact expected utility")
    ax.set_title(f"{k}: utilities")
    ax.legend(fontsize=6)
    fig.tight_layout()
    p2 = out / "b3_utilities_wc.png"
    save(fig, p2)
    return [p1, p2]


EXPERIMENT = Experiment(
    id="e170.bayes_ship_regimes",
    quick_budget_s=30,
    parallel_safe=True,
    title="E170 Bayesian control: three regimes; DP optimal under the true model; gains over always-verify overstate",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LLM-free: three synthetic worlds with known parameters (agentmill's, not the paper's benchmarks), "
               "two kernels, exact utilities by enumeration; the paper's regimes come from replays of LLM "
               "generators on nine benchmarks.",
)
