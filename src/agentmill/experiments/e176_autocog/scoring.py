"""E176 AC-6: scoring on all data favours the truth (scores as the repository's ``src/feedback.py`` [C]; threshold [R]).

The hidden ground truth is seed 1 itself (same rule, same prior, no extra action noise); seed 2 is another canonical
rule. Over 5 programmatic rounds (+ the validation round), with revisions admitted into the leaderboard, seed 1
should be rank 1 on every post-data leaderboard. A run passes if it is; the claim needs >= 9/10 runs (quick: 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

CANON = ("ttb", "tallying", "wadd")


@dataclass(frozen=True)
class Setup:
    runs: int = 10
    """Runs (3 quick / 10 full [R]); run k uses GT CANON[k % 3] against the next rule."""
    n_rounds: int = 5
    """Programmatic rounds (paper: 5 [C])."""
    n_designs: int = 200
    """SearchAdvocate random designs per proposal [R]."""
    max_candidates: int = 600
    """Reviser budget [R]."""


SETUPS = {"smoke": Setup(runs=1, n_rounds=1, n_designs=4, max_candidates=12),
          "quick": Setup(runs=3, n_designs=60, max_candidates=200), "full": Setup()}

CLAIMS = (
    Claim("E176-AC6", "Scoring on all data favours the truth: when the hidden ground truth is a slot theory, it is "
          "rank 1 on every post-data leaderboard (share of runs).", "[R] threshold", "—", "ac6_truth_rank1_share",
          ">=", 0.9),
)


def _run(args: tuple) -> dict:
    from agentmill.methods.autocog import library as L
    from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
    from agentmill.methods.autocog.cohorts import SimulatedCohort
    from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
    from agentmill.methods.autocog.recovery import battery_exclusions, load_batteries
    from agentmill.methods.autocog.theory import sha256

    s, k, work = args
    gt_name = CANON[k % 3]
    other = CANON[(k % 3 + 1 + (k // 3) % 2) % 3]
    gt = L.REGISTRY[gt_name]()
    run_dir = Path(work) / sha256(repr(s))[:10] / f"run{k}"
    loop = AutoCogLoop(LoopConfig(n_rounds=s.n_rounds, seed=1000 + k), seeds=(gt, L.REGISTRY[other]()),
                       advocates=tuple(SearchAdvocate(n_designs=s.n_designs) for _ in range(2)), arbiter=RuleArbiter(),
                       reviser=ProgramSpaceReviser(max_candidates=s.max_candidates),
                       cohort=SimulatedCohort(gt, action_noise=0.0, seed=1000 + k), run_dir=run_dir,
                       exclude_pairs=battery_exclusions(load_batteries()[1]))
    res = loop.run()
    post = [h for h in res.history if h["phase"] == "post_data"]
    ranks = [sorted(h["scores"], key=lambda t: -h["scores"][t]).index(gt.content_id) + 1 for h in post]
    return {"gt": gt_name, "other": other, "ranks": ranks, "ok": all(r == 1 for r in ranks),
            "history": [{"round": h["round"], "phase": h["phase"],
                         "scores": {loop.theories[t].name: v for t, v in h["scores"].items()}} for h in res.history]}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    items = [(s, k, str(ctx.work_dir)) for k in range(s.runs)]
    done = [0]

    def tick(_i: int, _r: Any) -> None:
        done[0] += 1
        ctx.progress("AC-6 runs", done[0], len(items))

    runs = ctx.executor.map(_run, items, on_result=tick)
    ctx.data["runs"] = runs
    return {"ac6_truth_rank1_share": proportion_estimate(sum(r["ok"] for r in runs), len(runs)),
            "ac6_mean_rank": Estimate.exact(float(np.mean([np.mean(r["ranks"]) for r in runs])), n=len(runs))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in data["runs"]:
        ax.plot(range(1, len(r["ranks"]) + 1), r["ranks"], "o-", label=f"GT {r['gt']} vs {r['other']}")
    ax.set_xlabel("round (post-data leaderboard)")
    ax.set_ylabel("rank of the true theory")
    ax.invert_yaxis()
    ax.legend(fontsize=7)
    ax.set_title("AC-6: the true theory's rank over rounds")
    fig.tight_layout()
    p = out / "truth_rank.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.scoring",
    quick_budget_s=70,
    parallel_safe=True,
    title="E176 AutoCog: scoring on all data favours the true theory",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Programmatic roles, simulated participants (no action noise); quick 3 runs with 60 designs and 200 "
               "reviser candidates, full 10 runs with 200 / 600. Leaderboard scores are relative and "
               "post-admit scores are in-sample [R]; only post-data leaderboards count here.",
)
