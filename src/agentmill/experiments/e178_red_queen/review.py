"""E178 RQ-3…RQ-7: co-evolving the reviewer in ReviewWorld (LLM-free: LogisticJudge and template writers).

Per world seed, after WC-1..WC-4 pass (a failing check withholds every claim with the failing check named), seven
512-evaluation searches run on the same world: ``review`` with McNemar, audit trap and erasure (the main arm);
the same with erasure off (RQ-4); with judge evolution off (RQ-5, the frozen biased judge); ``review-strict``
(RQ-6); ``review-lenient-anchor`` (RQ-7); and, reported only, the ``parity`` trap and the ``best_belief`` statistic.

Per-seed criteria (pre-registered [R], the thresholds of docs/methods/red_queen.md):
- RQ-3: the final judge's R(J) at matched quality ∈ [0.8, 1.25] and its holdout accuracy ≥ the incumbent's + 5 points.
- RQ-4: Δq = oracle mean quality of the selected writer, erasure on − off: mean ≥ 0.05 with CI lower > 0 (bootstrap
  over seeds); sign test p < 0.05 (full only: 3 seeds cannot reach it); without erasure the final pick equals the
  pick just before the first replacement in ≥ 70 % of runs that had one.
- RQ-5: with the judge frozen, the selected writer's acceptance ≥ the seed writer's + 0.15 while its oracle q ≤ the
  seed writer's − 0.05.
- RQ-6: review-strict (incumbent false-reject rate ≥ 40 % on the decision anchor by construction): final holdout
  false-reject rate < 20 % and holdout accuracy ≥ the incumbent's + 5 points.
- RQ-7: review-lenient-anchor: final holdout false-accept rate (oracle labels) ≥ the incumbent's + 5 points and the
  anchor–oracle disagreement flag (> 10 % of anchor labels differ from oracle labels) raised. An expected failure
  mode: the anchor defines "better".
Counts of passing seeds are judged against the pre-registered count (quick ≥ 2 of 3; full: RQ-3 and RQ-6 ≥ 8 of
10, RQ-5 ≥ 7, RQ-7 ≥ 9) as ``<claim>_seeds_short`` = required − passing ≤ 0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci
from agentmill.experiments.e178_red_queen import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup:
    seeds: tuple[int, ...] = (0, 1, 2)
    """World and search seeds (quick 3, full 10)."""
    budget: int = 512
    required_rq3: int = 2
    required_rq5: int = 2
    required_rq6: int = 2
    required_rq7: int = 2
    judge_sign_test: bool = False
    """Whether RQ-4's sign test is judged (full: 10 seeds can reach p < 0.05; 3 cannot)."""
    writer_docs: int = 4000
    """Fresh documents per writer for its acceptance under a judge."""
    variants: bool = True
    """Also run the reported-only arms (parity trap, best_belief statistic)."""


SETUPS = {
    "smoke": Setup(seeds=(0,), budget=64, writer_docs=500, variants=False),
    "quick": Setup(),
    "full": Setup(seeds=tuple(range(10)), required_rq3=8, required_rq5=7, required_rq6=8, required_rq7=9,
                  judge_sign_test=True),
}

_COUNT_WHY = ("a count of passing seeds over the fixed seed set, compared with the pre-registered count; each run "
              "is a deterministic function of its seed")

CLAIMS = (
    Claim("RQ-3", "Co-evolving the reviewer trains out its bias toward machine text: the final judge's acceptance "
          "ratio at matched quality R ∈ [0.8, 1.25] and its holdout accuracy ≥ the incumbent's + 5 points "
          "(seeds short of the required count).", "[A] abstract: over-acceptance up to 1.91× corrected by an "
          "adversarial objective; world and thresholds [R]", "1.91× → parity", "rq3_seeds_short", "<=", 0.0,
          judge_on="exact", exact_why=_COUNT_WHY),
    Claim("RQ-4a", "Selective erasure is load-bearing: the selected writer's oracle quality with erasure minus "
          "without ≥ 0.05 (CI over seeds above 0).", "[S] erasure is the load-bearing trick; threshold [R]", "—",
          "rq4_dq_mean", ">=", 0.05, ci_bound=0.0),
    Claim("RQ-4b", "The erasure gain is consistent across seeds: sign test p < 0.05 (full profile).", "[R]", "—",
          "rq4_sign_p", "<=", 0.05, judge_on="exact",
          exact_why="an exact binomial sign-test p-value over the fixed seed set"),
    Claim("RQ-4c", "Without erasure the search keeps the writer it had picked just before the first replacement "
          "(≥ 70 % of runs with a replacement).", "[S][R]", "—", "rq4_same_pick_share", ">=", 0.7,
          judge_on="exact", exact_why="a share of runs over the fixed seed set, each deterministic"),
    Claim("RQ-5", "A frozen biased judge is Goodharted: the selected writer's acceptance ≥ the seed writer's + 0.15 "
          "while its oracle quality ≤ the seed writer's − 0.05 (seeds short of the required count).",
          "[S] the fixed-evaluator failure mode (DGM); world [R]", "—", "rq5_seeds_short", "<=", 0.0,
          judge_on="exact", exact_why=_COUNT_WHY),
    Claim("RQ-6", "Calibration can mean becoming more lenient: an over-strict reviewer (false-reject rate ≥ 40 %) "
          "ends below 20 % with holdout accuracy + ≥ 5 points (seeds short of the required count).",
          "[S] the grader's biggest gain came from becoming less strict; [R]", "—", "rq6_seeds_short", "<=", 0.0,
          judge_on="exact", exact_why=_COUNT_WHY),
    Claim("RQ-7", "An imperfect (lenient) anchor steers the judge: final false-accept rate ≥ the incumbent's + 5 "
          "points and the anchor–oracle disagreement flag raised (seeds short of the required count; an expected "
          "failure mode).", "[S] the anchor itself rewards lenient reviewers; [R]", "—", "rq7_seeds_short", "<=",
          0.0, judge_on="exact", exact_why=_COUNT_WHY),
)

ARMS = {
    "main": ("review", {}),
    "no_erasure": ("review", {"erasure": "off"}),
    "frozen": ("review", {"judge_evolution": False}),
    "strict": ("review-strict", {}),
    "lenient": ("review-lenient-anchor", {}),
    "parity": ("review", {"trap": "parity"}),
    "best_belief": ("review", {"statistic": "best_belief"}),
}


def _judge_stats(world: Any, judge: Any) -> dict[str, float]:
    from agentmill.envs.review_world import accuracy, false_accept_rate, false_reject_rate

    sp = world.splits
    yo = world.oracle_labels(sp.holdout)
    r, raw = world.bias_ratio(judge)
    return {"R": r, "raw_ratio": raw, "holdout_acc": accuracy(judge, sp.holdout, yo),
            "holdout_frr": false_reject_rate(judge, sp.holdout, yo),
            "holdout_far": false_accept_rate(judge, sp.holdout, yo),
            "anchor_frr": false_reject_rate(judge, sp.select, sp.select_y)}


def run_arm(seed: int, arm: str, budget: int, writer_docs: int) -> dict[str, Any]:
    from agentmill.envs.review_world import LogisticJudge, writer_mean_quality
    from agentmill.methods.red_queen import RedQueenConfig, build_review_search

    variant, over = ARMS[arm]
    cfg = dataclasses.replace(RedQueenConfig(budget=budget, seed=seed), **over)
    search, world, slot = build_review_search(variant, cfg)
    res = search.run()
    inc = world.incumbent()
    final = search.judges[0]
    seed_theta = list(world.constants.seed_writer)
    best = list(res.best_state)
    # R(J) by epoch: the incumbent, then each adopted judge from the evaluation it was adopted at
    epochs = [{"at_eval": 0, "judge": inc.judge_id, **_judge_stats(world, inc)}]
    for rep in res.replacements:
        j = LogisticJudge.from_spec(rep["judge"])
        epochs.append({"at_eval": rep["at_eval"], "judge": j.judge_id, **_judge_stats(world, j)})
    first_rep = res.replacements[0]["at_eval"] if res.replacements else None
    pick_before = next((c["pick_before"] for c in res.checkpoint_log if c["at_eval"] == first_rep), None)
    sel_under_inc = world.writer_stats(best, inc, writer_docs, seed=1)
    seed_under_inc = world.writer_stats(seed_theta, inc, writer_docs, seed=1)
    return {
        "seed": seed, "arm": arm, "variant": variant, "config": cfg.to_dict(),
        "incumbent": _judge_stats(world, inc), "final": _judge_stats(world, final), "epochs": epochs,
        "replacements": [{k: v for k, v in r.items() if k != "judge"} for r in res.replacements],
        "best_node": res.best_node, "best_theta": best, "best_q": float(writer_mean_quality(best)),
        "seed_q": float(writer_mean_quality(seed_theta)),
        "best_acceptance_incumbent": sel_under_inc["acceptance"],
        "seed_acceptance_incumbent": seed_under_inc["acceptance"],
        "pick_before_first_replacement": pick_before, "n_nodes": res.n_nodes, "n_valid": res.n_valid,
        "n_invalid": res.n_invalid, "anchor_tests_run": res.anchor_tests_run,
        "audit_labels_used": res.audit_labels_used,
        "anchor_oracle_disagreement": float(np.mean(world.splits.select_y != world.oracle_labels(world.splits.select))),
        "incumbent_w0": inc.w0,
    }


def _sign_test_p(d: np.ndarray) -> float:
    from scipy.stats import binom

    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    n = pos + neg
    return 1.0 if n == 0 else float(binom.sf(pos - 1, n, 0.5))


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.review_world import WorldConstants
    from agentmill.methods.red_queen.review import failing_checks, world_checks

    ctx.data["world_constants"] = WorldConstants().to_dict()
    checks = {str(seed): world_checks(seed) for seed in s.seeds}
    ctx.data["world_checks"] = checks
    bad = {seed: failing_checks(c) for seed, c in checks.items() if failing_checks(c)}
    if bad:
        ctx.data["precondition"] = f"precondition not met: world checks fail: {bad}"
        return {}
    arms = [a for a in ARMS if s.variants or a not in ("parity", "best_belief")]
    runs: list[dict[str, Any]] = []
    total = len(arms) * len(s.seeds)
    for seed in s.seeds:
        for arm in arms:
            runs.append(run_arm(seed, arm, s.budget, s.writer_docs))
            ctx.progress("searches", len(runs), total)
    ctx.data["runs"] = runs
    by = {(r["seed"], r["arm"]): r for r in runs}
    seeds = list(s.seeds)
    rq3 = [0.8 <= by[(k, "main")]["final"]["R"] <= 1.25
           and by[(k, "main")]["final"]["holdout_acc"] >= by[(k, "main")]["incumbent"]["holdout_acc"] + 0.05
           for k in seeds]
    dq = np.array([by[(k, "main")]["best_q"] - by[(k, "no_erasure")]["best_q"] for k in seeds])
    with_rep = [by[(k, "no_erasure")] for k in seeds if by[(k, "no_erasure")]["replacements"]]
    same = [r["best_node"] == r["pick_before_first_replacement"] for r in with_rep]
    rq5 = [by[(k, "frozen")]["best_acceptance_incumbent"] >= by[(k, "frozen")]["seed_acceptance_incumbent"] + 0.15
           and by[(k, "frozen")]["best_q"] <= by[(k, "frozen")]["seed_q"] - 0.05 for k in seeds]
    rq6 = [by[(k, "strict")]["incumbent"]["anchor_frr"] >= 0.40 and by[(k, "strict")]["final"]["holdout_frr"] < 0.20
           and by[(k, "strict")]["final"]["holdout_acc"] >= by[(k, "strict")]["incumbent"]["holdout_acc"] + 0.05
           for k in seeds]
    rq7 = [by[(k, "lenient")]["final"]["holdout_far"] >= by[(k, "lenient")]["incumbent"]["holdout_far"] + 0.05
           and by[(k, "lenient")]["anchor_oracle_disagreement"] > 0.10 for k in seeds]
    ctx.data["per_seed"] = {"rq3": rq3, "rq4_dq": dq.tolist(), "rq4_same": same, "rq5": rq5, "rq6": rq6, "rq7": rq7}
    n = len(seeds)

    def short(passes: list[bool], required: int) -> Estimate:
        return Estimate.exact(required - sum(passes), n=n)

    def mean_over_seeds(vals: list[float]) -> Estimate:
        v = np.asarray(vals, dtype=float)
        return bootstrap_ci(v, n_boot=2000, seed=0) if v.size >= 2 else Estimate.exact(float(v.mean()), n=v.size)

    out: dict[str, Estimate] = {
        "rq3_seeds_short": short(rq3, s.required_rq3),
        "rq4_dq_mean": mean_over_seeds(dq.tolist()),
        "rq4_same_pick_share": Estimate.exact(float(np.mean(same)) if same else math.nan, n=len(same)),
        "rq5_seeds_short": short(rq5, s.required_rq5),
        "rq6_seeds_short": short(rq6, s.required_rq6),
        "rq7_seeds_short": short(rq7, s.required_rq7),
        "rq3_final_R": mean_over_seeds([by[(k, "main")]["final"]["R"] for k in seeds]),
        "rq3_incumbent_R": mean_over_seeds([by[(k, "main")]["incumbent"]["R"] for k in seeds]),
        "rq3_final_raw_ratio": mean_over_seeds([by[(k, "main")]["final"]["raw_ratio"] for k in seeds]),
        "rq3_acc_gain": mean_over_seeds([by[(k, "main")]["final"]["holdout_acc"]
                                         - by[(k, "main")]["incumbent"]["holdout_acc"] for k in seeds]),
        "rq5_acceptance_gain": mean_over_seeds([by[(k, "frozen")]["best_acceptance_incumbent"]
                                                - by[(k, "frozen")]["seed_acceptance_incumbent"] for k in seeds]),
        "rq5_q_change": mean_over_seeds([by[(k, "frozen")]["best_q"] - by[(k, "frozen")]["seed_q"] for k in seeds]),
        "rq6_final_frr": mean_over_seeds([by[(k, "strict")]["final"]["holdout_frr"] for k in seeds]),
        "rq7_far_change": mean_over_seeds([by[(k, "lenient")]["final"]["holdout_far"]
                                           - by[(k, "lenient")]["incumbent"]["holdout_far"] for k in seeds]),
        "audit_labels_per_run": mean_over_seeds([by[(k, "main")]["audit_labels_used"] for k in seeds]),
        "anchor_tests_per_run": mean_over_seeds([by[(k, "main")]["anchor_tests_run"] for k in seeds]),
    }
    for arm in ("parity", "best_belief"):
        if (seeds[0], arm) in by:
            out[f"{arm}_final_R"] = mean_over_seeds([by[(k, arm)]["final"]["R"] for k in seeds])
            out[f"{arm}_acc_gain"] = mean_over_seeds([by[(k, arm)]["final"]["holdout_acc"]
                                                      - by[(k, arm)]["incumbent"]["holdout_acc"] for k in seeds])
    if s.judge_sign_test:
        out["rq4_sign_p"] = Estimate.exact(_sign_test_p(dq), n=n)
    else:
        out["rq4_sign_p_observed"] = Estimate.exact(_sign_test_p(dq), n=n)
        withhold(ctx.data, ["rq4_sign_p"], f"{n} seeds: a sign test cannot reach p < 0.05 below 5 seeds; judged at "
                                           "full (10 seeds)")
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    runs = data.get("runs", [])
    paths = []
    arms = [("main", "review: McNemar + audit trap"), ("parity", "parity trap"), ("best_belief", "best-belief"),
            ("lenient", "lenient anchor")]
    arms = [(a, t) for a, t in arms if any(r["arm"] == a for r in runs)]
    if arms:
        fig, axes = plt.subplots(1, len(arms), figsize=(3.2 * len(arms), 3.2), sharey=True, squeeze=False)
        for ax, (arm, title) in zip(axes[0], arms):
            for r in (r for r in runs if r["arm"] == arm):
                budget = r["config"]["budget"]
                xs = [e["at_eval"] for e in r["epochs"]] + [budget]
                ys = [e["R"] for e in r["epochs"]]
                ax.step(xs, ys + [ys[-1]], where="post", alpha=0.7, label=f"seed {r['seed']}")
            ax.axhspan(0.8, 1.25, color="g", alpha=0.1)
            ax.set_xscale("symlog", base=2, linthresh=8)
            ax.set_xticks([0, 8, 32, 128, 512], ["0", "8", "32", "128", "512"])
            ax.set_xlabel("evaluation")
            ax.set_title(title, fontsize=8)
        axes[0][0].set_ylabel("judge bias R(J) at matched quality")
        axes[0][0].legend(fontsize=6)
        fig.suptitle("Judge bias by epoch (green: parity band)", fontsize=9)
        fig.tight_layout()
        p = out / "rq_judge_bias_by_epoch.png"
        save(fig, p)
        paths.append(p)
    pairs = [(r, next((x for x in runs if x["seed"] == r["seed"] and x["arm"] == "no_erasure"), None))
             for r in runs if r["arm"] == "main"]
    frozen = [r for r in runs if r["arm"] == "frozen"]
    if pairs and frozen:
        fig, ax = plt.subplots(figsize=(5, 3.4))
        for lab, rs, key in (("erasure on", [a for a, _ in pairs], "best_q"),
                             ("erasure off", [b for _, b in pairs if b], "best_q"), ("judge frozen", frozen, "best_q")):
            ax.scatter([r["seed"] for r in rs], [r[key] for r in rs], label=lab)
        ax.axhline(runs[0]["seed_q"], color="k", ls="--", lw=0.8, label="seed writer")
        ax.set_xticks(sorted({r["seed"] for r in runs}))
        ax.set_xlabel("seed")
        ax.set_ylabel("oracle mean quality of the selected writer")
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = out / "rq_selected_writer_quality.png"
        save(fig, p)
        paths.append(p)
    return paths


EXPERIMENT = Experiment(
    id="e178.review",
    title="E178 Red Queen: co-evolving a biased reviewer in ReviewWorld (RQ-3…RQ-7)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_budget_s=45,
    parallel_safe=True,
    scale_note="LLM-free: ReviewWorld (a simulated reviewer task with an oracle) with logistic judges and template "
               "writers, 512 evaluations per search, 7 arms × 3 (quick) / 10 (full) seeds; not the paper's LLM "
               "reviewers or papers. World constants are printed in the record (world_constants, world_checks).",
)
