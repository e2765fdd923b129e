"""E169 S-1 and S-9: the tools and metrics behave as the recipe's; the headline metric rewards over-prediction.

S-1 runs the conformance battery (``battery.py``: tool outputs, range rules, suggestions, search windows, import
graph, both JSON shapes, path refusals, metrics on hand-checked cases, case-file errors, every recovery path of the
loop with a scripted model). S-9 scores the "all files" predictor — every file of the filtered view, each as one
whole-file range — on single-file instances: one instance per source file of each snapshot (the gold is that
file, as if a bug sat there), so Acc@1 is 100 % by construction while precision is 1/|files in view|. A
random-file predictor (one file drawn uniformly) is the negative control: its Acc@1 is 1/|files| in expectation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, mean_estimate
from agentmill.experiments.e169_sherloc import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    corpora: tuple[str, ...] = ("battery",)
    """Snapshots for S-9: ``battery`` (the in-code fixture repository) and/or cached pyrepo packages
    (``name==version``, read from git objects at the base commit)."""
    random_draws: int = 200
    """Random-file predictor draws per instance (negative control)."""


SETUPS = {"smoke": Setup(random_draws=20), "quick": Setup(),
          "full": Setup(corpora=("battery", "cachetools==8.0.1", "toolz==1.2.0"), random_draws=1000)}

CLAIMS = (
    Claim("E169-S1", "The four tools, the metrics, the case-file validator and the loop's recovery paths behave as "
          "the recipe's (share of conformance checks passed).", "[C] NeMo-Skills recipes/sherloc; rules in "
          "docs/methods/sherloc.md", "all", "s1_checks_passed_share", ">=", 1.0, judge_on="exact",
          exact_why="a fixed battery of deterministic pass/fail checks"),
    Claim("E169-S9a", "The 'all files' predictor scores 100 % Accuracy@1 on single-file instances (the metric hole).",
          "[D] file recall ignores extra predictions", "100 %", "s9_all_files_acc1", ">=", 1.0, judge_on="exact",
          exact_why="a deterministic predictor scored on a fixed instance set"),
    Claim("E169-S9b", "... while its file precision is at most 1/(files in view) (max over instances of precision × "
          "files in view).", "[D]", "≤ 1/|files|", "s9_precision_times_files_max", "<=", 1.0, judge_on="exact",
          exact_why="a deterministic predictor scored on a fixed instance set"),
)


def _snapshots(corpora: tuple[str, ...]) -> dict[str, Any]:
    from agentmill.envs.pyrepo import open_repo
    from agentmill.experiments.e169_sherloc import battery
    from agentmill.methods.sherloc import RepoSnapshot

    out = {}
    for c in corpora:
        if c == "battery":
            out[c] = battery.snapshot()
        else:
            repo = open_repo(c)
            out[c] = RepoSnapshot.from_git(repo.root, repo.commit)
    return out


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e169_sherloc.battery import CHECKS
    from agentmill.methods.sherloc import Location, SherlocConfig, score

    results = {}
    for name, fn in CHECKS.items():
        try:
            results[name] = bool(fn())
        except Exception as e:  # noqa: BLE001 - a crashing check is a failed check, with its reason
            results[name] = False
            ctx.data.setdefault("check_errors", {})[name] = f"{type(e).__name__}: {str(e)[:200]}"
    cfg = SherlocConfig()
    rows = []
    for corpus, snap in _snapshots(s.corpora).items():
        view = [p for p in snap.files(cfg) if snap.is_text(p)]
        pred_all = [Location(p, 1, max(1, len(snap.lines(p)))) for p in view]
        rng = rng_for("e169.tools.random", corpus)
        for f in [p for p in view if p.endswith(".py")]:
            gold = [Location(f, 1, 1)]
            sc = score(gold, pred_all)
            draws = rng.integers(len(view), size=s.random_draws)
            rand_acc = float(np.mean([view[int(d)] == f for d in draws]))
            rows.append({"corpus": corpus, "file": f, "n_view": len(view), "all_acc1": sc.file_recall,
                         "all_precision": sc.file_precision, "all_tightness": sc.avg_prediction_tightness,
                         "random_acc1": rand_acc, "random_expected": 1 / len(view)})
    ctx.data.update({"checks": results, "s9_rows": rows,
                     "note": "S-9 instances: one per Python file of each snapshot's filtered view, gold = that file"})
    acc = np.array([r["all_acc1"] for r in rows])
    pf = np.array([r["all_precision"] * r["n_view"] for r in rows])
    rand = np.array([r["random_acc1"] - r["random_expected"] for r in rows])
    return {"s1_checks_passed_share": Estimate.exact(sum(results.values()) / len(results), n=len(results)),
            "s9_all_files_acc1": Estimate.exact(float(acc.mean()), n=len(rows)),
            "s9_precision_times_files_max": Estimate.exact(float(pf.max()), n=len(rows)),
            "s9_all_files_precision_mean": Estimate.exact(float(np.mean([r["all_precision"] for r in rows])),
                                                          n=len(rows)),
            "random_file_acc1_minus_expected": mean_estimate(rand) if len(rand) > 1 else Estimate.exact(rand[0], 1)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data["s9_rows"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    corpora = sorted({r["corpus"] for r in rows})
    x = np.arange(len(corpora))
    for k, (key, lab) in enumerate((("all_acc1", "all files: Acc@1"), ("all_precision", "all files: precision"),
                                     ("random_acc1", "random file: Acc@1"))):
        ax.bar(x + (k - 1) * 0.27, [np.mean([r[key] for r in rows if r["corpus"] == c]) for c in corpora], 0.27,
               label=lab)
    ax.set_xticks(x)
    ax.set_xticklabels(corpora, fontsize=8)
    ax.set_ylabel("mean over single-file instances")
    ax.set_title("S-9: Acc@1 rewards listing every file", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "s9_metric_hole.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e169.sherloc_tools",
    title="E169 SHERLOC: tool and metric conformance; the Acc@1 metric hole",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=True,
    quick_budget_s=5,
    scale_note="Conformance battery on an in-code fixture repository (no model); S-9 on every Python file of the "
               "fixture's filtered view (full: also cachetools 8.0.1 and toolz 1.2.0 at their release commits).",
)
