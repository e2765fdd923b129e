"""E170 B-5 (pyrepo), B-6, B-7, B-9 and PF-8: Bayesian control on real Python repositories, costs in seconds.

Instances are seeded bugs in real PyPI packages (``envs.pyrepo``: cachetools, toolz), each with up to
``candidates`` LM-free candidate patches (the revert, the unchanged bug, another operator at the bug site, a one-token
edit elsewhere). Every candidate is labelled by the full sandboxed pytest oracle and checked by the LM-free critics
L0_syntax, L1_lint (pyflakes), L2_public (a fixed 25 % of test files) and L2_targeted (the changed module's test
files); wall seconds of each call are recorded (PF-8). Records go to a fsynced JSONL in the work dir (resume).

Costs are measured seconds: c_ver = mean oracle seconds, c_k = mean seconds of critic k, c_gen = c_ver / 6 (the
paper's c_gen : c_ver = 5 : 30; a pool generator itself costs nothing) [R]. A cost cell is θ = c_ver / R, i.e. R
(seconds of compute a correct patch is worth) = c_ver / θ. Each instance's candidates are ordered by a pool generator
with the IID kernel. The Bayesian controllers are calibrated by 2-fold cross-fitting over instances (calibrated on
one half, replayed on the other), never on the instances they are scored on. Baselines: always_verify, best_of_3,
gate(k) for every critic, pipeline(L0_syntax, L2_public) (the analogue of the paper's L0-then-L3 pipeline: no LM
reviewer here), refine_then_verify(1), and give_up.

Per cell: paired bootstrap (B = 1000, seed 42) of DP − best baseline and best baseline − always_verify over instances;
the regime rule with ties = CI containing 0 (and a fifth label, "baseline", when a baseline other than
always_verify or a gate is best and the DP does not tie it: on records the DP can lose). B-6a counts cells whose CI of DP − best baseline lies wholly below 0;
B-6b counts regime-C cells whose CI lies wholly above 0; B-7 counts regime-C cells whose CI of (best baseline −
always_verify) does not lie wholly above 0. B-9 calibrates on cachetools and deploys on toolz. The LM roles (B-5's
token-probability baseline, B-10's reviewer) score these same records in ``e170.bayes_ship_lm``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, mean_estimate, paired_diff
from agentmill.experiments.e170_bayes_ship import PAPER
from agentmill.experiments.e170_bayes_ship.pool import CRITICS, measure_pool, seeded_instances, trajectories
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup:
    packages: tuple[str, ...] = ("cachetools==8.0.1", "toolz==1.2.0")
    """Corpus packages (``fixture`` = the in-code fixture package, no fetch)."""
    instances: tuple[int, ...] = (6, 4)
    """Seeded instances per package."""
    candidates: int = 4
    """Candidates per instance (revert, noop, same-site, wrong-site, in that preference)."""
    thetas: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6)
    n_boot: int = 1000
    seed: int = 0


SETUPS = {"smoke": Setup(packages=("fixture",), instances=(1,), candidates=2, thetas=(0.1, 0.3), n_boot=100),
          "quick": Setup(packages=("fixture",), instances=(2,), candidates=3, thetas=(0.1, 0.3), n_boot=200),
          "full": Setup()}

_SELF = ("a count of cost cells; each cell's own paired-bootstrap interval carries the sampling noise, and the "
         "count is fixed once the intervals are")
CLAIMS = (
    Claim("E170-B5-pyrepo-auroc", "On real-repo candidates the full-evidence belief (cross-fitted calibration) ranks "
          "correct patches well: AUROC.", "[P]; 0.87 [S]", "0.87 (PRR or AUROC)", "b5_pyrepo_auroc", ">=", 0.80),
    Claim("E170-B5-pyrepo-frac", "The belief beats the raw tool-success score (fraction of critics passed) by ≥ 0.03 "
          "AUROC.", "[P] beats raw tool-success baselines", "—", "b5_pyrepo_auroc_minus_fraction", ">=", 0.03),
    Claim("E170-B6a", "With measured costs, Bayesian control (DP) is never significantly worse than the best baseline: "
          "cells whose CI of DP − best baseline lies wholly below 0.", "[P]", "matches best baseline everywhere",
          "b6_cells_bayes_worse", "<=", 0, judge_on="exact", exact_why=_SELF),
    Claim("E170-B6b", "... and beats it somewhere: regime-C cells whose CI of DP − best baseline lies wholly above 0.",
          "[P]", "beats it where verification is costly", "b6_c_cells_bayes_better", ">=", 1, judge_on="exact",
          exact_why=_SELF),
    Claim("E170-B7-pyrepo", "In every regime-C cell the gain over always-verify overstates the gain over the best "
          "baseline: C cells whose CI of (best baseline − always_verify) is not wholly above 0.", "[S][D]", "—",
          "b7_c_cells_not_overstated", "<=", 0, judge_on="exact", exact_why=_SELF),
    Claim("E170-B9", "Calibrated on cachetools and deployed on toolz, the drift alarm fires on ≥ 1 critic whenever a "
          "critic's gap differs by ≥ 0.2 between the two (1 = it did).", "[C] misspecification", "—",
          "b9_alarm_when_needed", ">=", 1, judge_on="exact",
          exact_why="one deterministic check of the alarm on the fixed records"),
)


def collect(s: Setup, ctx: RunContext) -> list[dict[str, Any]]:
    """One row per (instance, candidate): critic outcomes and seconds, oracle label and seconds. Resumable."""
    insts = seeded_instances(s.packages, s.instances, seed=s.seed, candidates=s.candidates, work=ctx.work_dir)
    return measure_pool(insts, ctx.work_dir / f"candidates-{s.seed}.jsonl",
                        lambda done, total: ctx.progress("candidates", done, total))


def _baselines(J: int) -> list[Any]:
    from agentmill.methods.bayes_ship.baselines import always_verify, best_of_n, fixed_pipeline, gate, give_up
    from agentmill.methods.bayes_ship.baselines import refine_then_verify

    return ([always_verify(), best_of_n(3)] + [gate(k, J) for k in CRITICS]
            + [fixed_pipeline(("L0_syntax", "L2_public"), J), refine_then_verify(1), give_up()])


def cross_fit_utilities(trajs: list[list[Any]], cost: Any, J: int, seed: int) -> tuple[dict[str, np.ndarray], Any]:
    """Utilities per instance of every policy; the Bayesian ones are calibrated on the other fold."""
    from agentmill.methods.bayes_ship import BayesShipConfig
    from agentmill.methods.bayes_ship.calibration import calibrate, iid_kernel
    from agentmill.methods.bayes_ship.core import DPController, GreedyController
    from agentmill.methods.bayes_ship.replay import simulate_policy

    n = len(trajs)
    folds = np.arange(n) % 2
    util: dict[str, np.ndarray] = {}
    for p in _baselines(J):
        util[p.name] = np.array([simulate_policy(t, p, cost).utility for t in trajs])
    util["bayes_dp"] = np.zeros(n)
    util["bayes_greedy"] = np.zeros(n)
    calibs = []
    for f in (0, 1):
        train = [r for i, t in enumerate(trajs) if folds[i] != f for r in t]
        if not train:
            continue
        cal = iid_kernel(calibrate(train, list(CRITICS)))
        calibs.append(cal)
        dp = DPController(cal, cost, BayesShipConfig(controller="dp", max_candidates=J))
        gr = GreedyController(cal, cost, BayesShipConfig(max_candidates=J))
        for i, t in enumerate(trajs):
            if folds[i] == f:
                util["bayes_dp"][i] = simulate_policy(t, dp, cost).utility
                util["bayes_greedy"][i] = simulate_policy(t, gr, cost).utility
    return util, calibs


def label_cell_ci(util: dict[str, np.ndarray], n_boot: int, seed: int) -> tuple[str, str, dict[str, Any]]:
    """Regime of a cell on records: ties = the paired 95 % CI of the difference contains 0."""
    best = max(util, key=lambda k: util[k].mean())
    base = [k for k in util if not k.startswith("bayes") and k != "give_up"]
    best_base = max(base, key=lambda k: util[k].mean())

    def d(a: str, b: str) -> Estimate:
        if a == b:
            return Estimate.exact(0.0, n=len(util[a]))
        return paired_diff(util[a], util[b], n_boot=n_boot, seed=seed)

    info = {"best": best, "best_baseline": best_base, "dp_minus_best_baseline": d("bayes_dp", best_base).to_dict(),
            "best_baseline_minus_av": d(best_base, "always_verify").to_dict(),
            "dp_minus_av": d("bayes_dp", "always_verify").to_dict()}
    tie = lambda a, b: d(a, b).lo <= 0  # noqa: E731  (a ≥ b by choice of a)
    if tie(best, "give_up"):
        return "none", best_base, info
    if tie(best, "always_verify"):
        return "A", best_base, info
    if any(tie(best, g) and util[g].mean() > util["always_verify"].mean() for g in base if g.startswith("gate(")):
        return "B", best_base, info
    if best.startswith("bayes") or tie(best, "bayes_dp"):
        return "C", best_base, info
    return "baseline", best_base, info  # another baseline is best and the DP does not tie it


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _measure(s, ctx)


def _measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.core.stats import auroc
    from agentmill.envs.pyrepo import layers
    from agentmill.methods.bayes_ship import CostModel
    from agentmill.methods.bayes_ship.calibration import calibrate, drift_check, iid_kernel
    from agentmill.methods.bayes_ship.uq import auroc_ci, auroc_diff_ci, fraction_passed, full_evidence_belief

    try:
        rows = collect(s, ctx)
    except FileNotFoundError as e:
        ctx.data["precondition"] = f"precondition not met: pyrepo pool unavailable ({e})"
        return {}
    trajs = trajectories(rows, s.seed)
    J = max(len(t) for t in trajs)
    c_ver = float(np.mean([r["oracle_s"] for r in rows]))
    crit_s = {k: float(np.mean([r["critic_s"][k] for r in rows])) for k in CRITICS}
    c_gen = c_ver / 6
    cells = []
    for th in s.thetas:
        R = c_ver / th
        cost = CostModel(R=R, c_gen=c_gen, c_ver=c_ver, critic_costs=crit_s, unit="seconds")
        util, _ = cross_fit_utilities(trajs, cost, J, s.seed)
        label, best_base, info = label_cell_ci(util, s.n_boot, 42)
        cells.append({"theta": th, "R_seconds": R, "label": label, **info,
                      "mean_utility": {k: float(v.mean()) for k, v in util.items()},
                      "dp_critic_calls": None})
        ctx.progress("cost cells", len(cells), len(s.thetas))
    # B-5: cross-fitted full-evidence belief
    recs = [r for t in trajs for r in t]
    folds = {t[0].instance_id: i % 2 for i, t in enumerate(trajs)}
    bel = np.zeros(len(recs))
    for f in (0, 1):
        train = [r for r in recs if folds[r.instance_id] != f]
        if not train:
            continue
        cal = iid_kernel(calibrate(train, list(CRITICS)))
        for i, r in enumerate(recs):
            if folds[r.instance_id] == f:
                bel[i] = full_evidence_belief(r, cal)
    y = np.array([bool(r.y) for r in recs])
    cl = np.array([r.instance_id for r in recs])
    frac = np.array([fraction_passed(r, CRITICS) for r in recs])
    full_cal = calibrate(recs, list(CRITICS))
    out: dict[str, Estimate] = {}
    if y.any() and not y.all():
        out["b5_pyrepo_auroc"] = auroc_ci(bel, y, cl, n_boot=s.n_boot, seed=s.seed)
        out["b5_pyrepo_auroc_minus_fraction"] = auroc_diff_ci(bel, frac, y, cl, n_boot=s.n_boot, seed=s.seed)
    bad = [c for c in cells if min(c["dp_minus_best_baseline"]["hi"], c["dp_minus_best_baseline"]["value"]) < 0
           and c["dp_minus_best_baseline"]["hi"] < 0]
    c_cells = [c for c in cells if c["label"] == "C"]
    better = [c for c in c_cells if c["dp_minus_best_baseline"]["lo"] > 0]
    not_over = [c for c in c_cells if not c["best_baseline_minus_av"]["lo"] > 0]
    out["b6_cells_bayes_worse"] = Estimate.exact(len(bad), n=len(trajs))
    out["b6_c_cells_bayes_better"] = Estimate.exact(len(better), n=len(trajs))
    out["b7_c_cells_not_overstated"] = Estimate.exact(len(not_over) if c_cells else float("nan"), n=len(trajs))
    out["b6_regime_c_cells"] = Estimate.exact(len(c_cells), n=len(cells))
    out["l0_syntax_gap"] = Estimate.exact(full_cal.critics["L0_syntax"].gap, n=len(recs))
    for k in CRITICS:
        out[f"pf8_{k}_s"] = mean_estimate([r["critic_s"][k] for r in rows], seed=s.seed)
    out["pf8_oracle_s"] = mean_estimate([r["oracle_s"] for r in rows], seed=s.seed)
    # B-9: calibrate on package A, deploy on package B
    pk = sorted({r["repo"] for r in rows})
    b9: dict[str, Any] = {"packages": pk}
    if len(pk) >= 2:
        a_recs = [r for r in recs if r.repo == pk[0]]
        b_recs = [r for r in recs if r.repo == pk[1]]
        cal_a = iid_kernel(calibrate(a_recs, list(CRITICS)))
        cal_b = iid_kernel(calibrate(b_recs, list(CRITICS)))
        gaps = {k: (cal_a.critics[k].gap, cal_b.critics[k].gap) for k in CRITICS}
        need = any(abs(a - b) >= 0.2 for a, b in gaps.values())
        alarms = drift_check(cal_a, b_recs)
        b9.update({"gaps": gaps, "alarm_needed": need, "alarms": [str(a) for a in alarms]})
        out["b9_alarm_when_needed"] = Estimate.exact(float(bool(alarms)) if need else float("nan"), n=len(b_recs))
        from agentmill.methods.bayes_ship import BayesShipConfig
        from agentmill.methods.bayes_ship.core import DPController
        from agentmill.methods.bayes_ship.replay import simulate_policy

        cost = CostModel(R=c_ver / 0.2, c_gen=c_gen, c_ver=c_ver, critic_costs=crit_s, unit="seconds")
        b_trajs = [t for t in trajs if t[0].repo == pk[1]]
        u_wrong = [simulate_policy(t, DPController(cal_a, cost, BayesShipConfig(controller="dp", max_candidates=J)),
                                   cost).utility for t in b_trajs]
        u_own, _ = cross_fit_utilities(b_trajs, cost, J, s.seed)
        b9["utility_drop_at_theta_0.2"] = float(np.mean(u_own["bayes_dp"]) - np.mean(u_wrong))
    else:
        withhold(ctx.data, ["b9_alarm_when_needed"], "one package in this profile: the cross-package check needs two")
    ctx.data.update({"cells": cells, "costs_seconds": {"c_ver": c_ver, "c_gen": c_gen, **crit_s},
                     "n_instances": len(trajs), "n_candidates": len(recs), "share_correct": float(y.mean()),
                     "calibration_all": full_cal.to_dict(), "b9": b9, "sandbox_layers": layers(),
                     "point": {"auroc_belief": auroc(bel, y) if y.any() and not y.all() else None,
                               "auroc_fraction": auroc(frac, y) if y.any() and not y.all() else None},
                     "kinds": {k: int(sum(r["kind"] == k for r in rows)) for k in sorted({r["kind"] for r in rows})}})
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    cells = data.get("cells") or []
    if not cells:
        return []
    fig, ax = plt.subplots(figsize=(7, 4))
    th = [c["theta"] for c in cells]
    names = list(cells[0]["mean_utility"])
    for n in names:
        ax.plot(th, [c["mean_utility"][n] for c in cells], lw=2 if n.startswith("bayes") else 1, label=n)
    for c in cells:
        ax.annotate(c["label"], (c["theta"], ax.get_ylim()[1]), fontsize=8, ha="center", va="top")
    ax.set_xscale("log")
    ax.set_xlabel("θ = c_ver / R (R = seconds a correct patch is worth)")
    ax.set_ylabel("mean utility (seconds)")
    ax.set_title("pyrepo: replayed utilities per cost cell (labels: regime)", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    p = out / "b6_pyrepo_regimes.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e170.bayes_ship_pyrepo",
    quick_budget_s=25,
    quick_check="pipeline check on the in-code fixture package (2 instances); verdicts come from the full run on "
                "cachetools and toolz",
    title="E170 Bayesian control on real repositories with measured costs",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LM-free pool generator (revert / unchanged bug / same-site / wrong-site candidates) over seeded bugs "
               "in cachetools and toolz, sandboxed pytest oracle, costs in measured seconds; a handful of instances "
               "(the paper: six LLM generators, nine benchmarks). Pool generators make control look easy.",
)
