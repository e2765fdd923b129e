"""E170 B-5 (synthetic) and the shuffled-labels control: the belief as a correctness score.

World W-C (b₀ = 0.2; critics L0 (0.9, 0.9), L2 (0.8, 0.3), L3 (0.8, 0.35), L4 (0.75, 0.3)), IID kernel. A calibration
split of instances fits the controller's model (``calibrate``: Beta(1,1)-smoothed pass rates); on a separate
evaluation split every candidate gets its full-evidence belief (all four critics applied to the calibrated prior).
The oracle is the same belief with the world's true parameters, the best any score of these outcomes can do.
Intervals resample instances (5 candidates each), paired where two scores are compared. Baseline score: the
fraction of critics passed (raw tool success). Control: the same beliefs against labels shuffled across candidates.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e170_bayes_ship import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    instances: int = 2000
    """Evaluation instances (× 5 candidates: 10⁴ candidates at quick)."""
    calib_instances: int = 400
    """Calibration instances (× 5 candidates)."""
    n_boot: int = 1000
    seed: int = 0


SETUPS = {"smoke": Setup(instances=100, calib_instances=50, n_boot=100), "quick": Setup(n_boot=500),
          "full": Setup(instances=4000, calib_instances=2000, n_boot=1000)}

CLAIMS = (
    Claim("E170-B5-synth", "The calibrated belief ranks candidates as well as the oracle posterior: AUROC(belief) − "
          "AUROC(oracle belief) on the same candidates (paired over instances).", "[P] belief beats token-probability "
          "and tool-success baselines; 0.87 ranking quality [S]", "0.87 (PRR or AUROC, not stated)",
          "b5_synth_auroc_minus_oracle", ">=", -0.01),
    Claim("E170-B5-shuffled", "Negative control: against shuffled labels the belief's AUROC is chance (its 95 % CI "
          "inside [0.45, 0.55]).", "[R] control", "—", "b5_shuffled_auroc", "in", 0.45, upper=0.55),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.core.calibration import brier, ece, prr, rejection_curve, reliability_bins
    from agentmill.core.stats import auroc
    from agentmill.methods.bayes_ship.calibration import calibrate, iid_kernel
    from agentmill.methods.bayes_ship.synthetic import WORLD_C, oracle_auroc, sample_trajectories
    from agentmill.methods.bayes_ship.uq import (
        auroc_ci,
        auroc_diff_ci,
        fraction_passed,
        full_evidence_belief,
        prr_ci,
    )

    w = WORLD_C
    names = list(w.critics)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = iid_kernel(calibrate([r for t in sample_trajectories(w, s.calib_instances, s.seed + 100)
                                    for r in t], names))
        true = w.calibration()
    recs = [r for t in sample_trajectories(w, s.instances, s.seed) for r in t]
    y = np.array([bool(r.y) for r in recs])
    clusters = np.array([r.instance_id for r in recs])
    belief = np.array([full_evidence_belief(r, cal) for r in recs])
    oracle = np.array([full_evidence_belief(r, true) for r in recs])
    frac = np.array([fraction_passed(r) for r in recs])
    ctx.progress("scores", 1, 4)
    nb = s.n_boot
    diff = auroc_diff_ci(belief, oracle, y, clusters, n_boot=nb, seed=s.seed)
    a_bel = auroc_ci(belief, y, clusters, n_boot=nb, seed=s.seed)
    ctx.progress("AUROC", 2, 4)
    p_bel = prr_ci(belief, y, clusters, n_boot=nb, seed=s.seed)
    shuffled = np.random.default_rng([s.seed, 5]).permutation(y)
    a_shuf = auroc_ci(belief, shuffled, clusters, n_boot=nb, seed=s.seed)
    ctx.progress("PRR", 3, 4)
    frac_diff = auroc_diff_ci(belief, frac, y, clusters, n_boot=nb, seed=s.seed)
    ctx.progress("baselines", 4, 4)
    curve_b = rejection_curve(belief, y)
    curve_o = rejection_curve(y, y)
    step = max(1, curve_b.size // 200)
    ctx.data.update({
        "calibration": cal.to_dict(), "n_candidates": int(y.size), "positives": int(y.sum()),
        "oracle_auroc_exact": oracle_auroc(w), "reliability": reliability_bins(belief, y, 10),
        "rejection_curve": {"belief": curve_b[::step].tolist(), "oracle": curve_o[::step].tolist(),
                            "random": float(y.mean())},
        "point": {"auroc_belief": auroc(belief, y), "auroc_oracle": auroc(oracle, y),
                  "auroc_fraction_passed": auroc(frac, y), "prr_belief": prr(belief, y), "prr_oracle": prr(oracle, y),
                  "prr_fraction_passed": prr(frac, y), "ece_belief": ece(belief, y), "brier_belief": brier(belief, y),
                  "ece_oracle": ece(oracle, y), "brier_oracle": brier(oracle, y)}})
    return {"b5_synth_auroc_minus_oracle": diff, "b5_synth_auroc": a_bel, "b5_synth_prr": p_bel,
            "b5_shuffled_auroc": a_shuf, "b5_synth_auroc_minus_fraction_passed": frac_diff,
            "b5_synth_ece": Estimate.exact(ece(belief, y), n=int(y.size)),
            "b5_synth_brier": Estimate.exact(brier(belief, y), n=int(y.size)),
            "b5_oracle_auroc_exact": Estimate.exact(oracle_auroc(w))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rel = np.array(data["reliability"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    ax = axes[0]
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--")
    ax.scatter(rel[:, 0], rel[:, 1], s=10 + 200 * rel[:, 2] / rel[:, 2].max())
    ax.plot(rel[:, 0], rel[:, 1])
    ax.set_xlabel("belief (mean in bin)")
    ax.set_ylabel("share correct")
    ax.set_title(f"belief reliability (ECE {data['point']['ece_belief']:.3f})", fontsize=9)
    ax = axes[1]
    rc = data["rejection_curve"]
    x = np.linspace(0, 1, len(rc["belief"]), endpoint=False)
    ax.plot(x, rc["belief"], label=f"belief (PRR {data['point']['prr_belief']:.2f})")
    ax.plot(x, rc["oracle"], label="oracle rejection")
    ax.axhline(rc["random"], color="grey", ls="--", label="random")
    ax.set_xlabel("rejected fraction")
    ax.set_ylabel("share correct among kept")
    ax.set_title("prediction-rejection curve", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "b5_belief_reliability.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e170.bayes_ship_uq",
    quick_budget_s=20,
    parallel_safe=True,
    title="E170 Bayesian control: the belief is a good correctness score (synthetic world)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LLM-free: synthetic world W-C with known critic likelihoods (not the paper's benchmarks or "
               "generators); the oracle posterior is the ceiling, so this checks calibration and scoring, not the "
               "paper's comparison with token probabilities (that needs real candidates: the pyrepo arm).",
)
