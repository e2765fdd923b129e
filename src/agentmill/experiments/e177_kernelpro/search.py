"""E177 K-4, K-6 (replay), K-7, K-8, K-10 (library arm), K-13: search claims judged against exhaustively measured
tables (docs/methods/kernelpro.md, Search).

Tables: every library candidate of sum (320 points: the design's size), transpose (192), softmax_rows and layernorm
(160 each) compiled with ``-march=x86-64-v3`` (``-march=native`` is one flag action), walled and timed interleaved
with the numpy reference (one thread, C backend), measured on this machine inside the run; for K-13 softmax_rows'
48-point sub-space gains two exploit actions (skip_work, cache_output), each measured on every point. Replays run
MCTS, greedy and random search over a table (20 seeds per task, budget 40 evaluations). Speeds are speedups over
the numpy reference measured in the same child, which cancels the host's drift between candidates; the host's
load average before and after the tables is recorded. Heavy (tables): quick runs a 4-point sum table as a
pipeline check; full judges."""

from __future__ import annotations

import math
import os
import random
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci, proportion_estimate
from agentmill.experiments.e177_kernelpro import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    tasks: tuple[str, ...] = ("sum", "transpose", "softmax_rows", "layernorm")
    space: str = "full"
    seeds: int = 20
    budget: int = 40
    k13_task: str = "softmax_rows"
    k13: bool = True
    n_boot: int = 2000


SETUPS = {"smoke": Setup(tasks=("sum",), space="smoke", seeds=3, budget=3, k13=False),
          "quick": Setup(tasks=("sum",), space="smoke", seeds=5, budget=3, k13=False),
          "full": Setup()}
QUICK_CHECK = "quick replays over a 4-point sum table (pipeline check); full measures 832 candidates + 96 exploits"
EXACT_P = "a test's p-value over the fixed (task, seed) replays of measured tables; its noise is inside the test"
CLAIMS = (
    Claim("E177-K4-recall", "Assembly inspection flags the scalar-reduction candidates (ScalarFallback recall vs the "
          "action path: no fast-math on a reduction task).", "[S] the SASS tool caught 37 scalar kernels", "37 kernels",
          "k4_recall", ">=", 0.9, judge_on="exact", exact_why="a share over the fixed measured table"),
    Claim("E177-K4-precision", "ScalarFallback's flags are right (precision vs the action path).", "[S]", "—",
          "k4_precision", ">=", 0.9, judge_on="exact", exact_why="a share over the fixed measured table"),
    Claim("E177-K4-gain", "Following ScalarFallback's recommended action (fast-math) on a flagged candidate gives a "
          "median speedup ≥ 1.5×.", "[R]", "—", "k4_action_median_gain", ">=", 1.5),
    Claim("E177-K6-share", "MCTS reaches ≥ 95 % of the exhaustive optimum in more runs than greedy at equal budget "
          "(share difference > 0).", "[P] MCTS +26 % geomean vs greedy", "+26 %", "k6_share_mcts_minus_greedy",
          ">=", 0.0, ci_bound=0.0),
    Claim("E177-K6-wilcoxon", "MCTS's final speedups exceed greedy's (paired one-sided Wilcoxon over (task, seed), "
          "p < 0.05).", "[P] p = 0.004", "p = 0.004", "k6_wilcoxon_p", "<=", 0.05, judge_on="exact",
          exact_why=EXACT_P),
    Claim("E177-K8-guided", "Tool-guided proposals (w = 4) reach 90 % of the optimum in fewer evaluations than "
          "unguided ones (w = 0): paired one-sided Wilcoxon p < 0.05.", "[P] analogue for a rule-based proposer",
          "—", "k8_wilcoxon_p", "<=", 0.05, judge_on="exact", exact_why=EXACT_P),
    Claim("E177-K8-shuffled", "Findings shuffled from another task do not help: shuffled vs unguided two-sided "
          "Wilcoxon p ≥ 0.05.", "[R] negative control", "—", "k8_shuffled_p", ">=", 0.05, judge_on="exact",
          exact_why=EXACT_P),
    Claim("E177-K10-plateau", "Guided search ends on a correct-but-slow plateau (best ≤ 1.05 × the root) no more "
          "often than unguided (share difference ≤ 0).", "[S] 0 % with profiling vs 10 % without", "0 % vs 10 %",
          "k10_plateau_guided_minus_unguided", "<=", 0.0),
    Claim("E177-K13-nowall", "Without a hard wall (KernelBench's allclose only) the search returns an exploit in "
          "≥ 50 % of runs on at least one task.", "[P] fast-but-wrong code wins without a wall", "—",
          "k13_nowall_exploit_share", ">=", 0.5, judge_on="exact", exact_why="a share over fixed seeded replays"),
    Claim("E177-K13-wall", "With the full wall no run returns an exploit.", "[P]", "0 %", "k13_wall_exploit_share",
          "<=", 0.0, judge_on="exact", exact_why="a share over fixed seeded replays"),
)


def _replays(table: Any, algo: str, cfg: Any, seeds: int, *, wall_on: bool = True,
             recommend: Any = None) -> list[Any]:
    from agentmill.methods.kernelpro import search

    which = table.which
    out = []
    for sd in range(seeds):
        c = replace(cfg, seed=sd)
        rng = np.random.default_rng([sd, zlib.crc32(algo.encode()), int(cfg.guided_weight * 10)])  # stable per run
        ev = (lambda p: table.outcome(p, wall_on=wall_on))
        out.append(search.run_algo(algo, table.task, ev, c, which=which, s_cap=table.meta["s_cap"], rng=rng,
                                   **({"recommend": recommend} if recommend is not None and algo != "random" else {})))
    return out


def _paired_boot(a: np.ndarray, b: np.ndarray, n_boot: int, stat=np.mean) -> Estimate:
    d = np.asarray(a, float) - np.asarray(b, float)
    return bootstrap_ci(d, stat, n_boot=n_boot) if len(d) > 1 else Estimate.exact(float(stat(d)), n=len(d))


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from scipy.stats import wilcoxon

    from agentmill.methods.kernelpro import roofline, search, tables
    from agentmill.methods.kernelpro.config import SearchConfig

    c = roofline.calibrate(threads=(1,), processes=3, which="smoke")
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    tbs = {t: tables.build(t, s.space, ceilings=c, progress=ctx.progress) for t in s.tasks}
    ctx.data["tables_wall_s"] = time.perf_counter() - t0
    ctx.data["loadavg"] = {"before_tables": list(load_before), "after_tables": list(os.getloadavg())}
    ctx.data["table_cost_s"] = {t: {"compile": float(sum(r.get("compile_s", 0.0) for r in tb.rows.values())),
                                    "run": float(sum(r.get("run_s", 0.0) for r in tb.rows.values())),
                                    "points": len(tb.rows), "cached": bool(tb.meta.get("cached", False))}
                                for t, tb in tbs.items()}
    cfg = SearchConfig(budget=s.budget)
    res: dict[str, dict[str, list[Any]]] = {}
    per_run: list[dict[str, Any]] = []
    for t, tb in tbs.items():
        opt = tb.optimum()
        arms = {"mcts": _replays(tb, "mcts", cfg, s.seeds), "greedy": _replays(tb, "greedy", cfg, s.seeds),
                "random": _replays(tb, "random", cfg, s.seeds),
                "mcts_linear": _replays(tb, "mcts", replace(cfg, reward="linear"), s.seeds),
                "mcts_unguided": _replays(tb, "mcts", replace(cfg, guided_weight=0.0), s.seeds)}
        others = [r for o, otb in tbs.items() if o != t for r in otb.rows.values() if r["recommended"]]
        if others:
            pool = [tuple(tuple(x) for x in r["recommended"]) for r in others]
            rnd = random.Random(f"shuffle-{t}")
            shuffled: dict[str, tuple] = {}

            def shuf(p: Any, o: Any, _pool=pool, _rnd=rnd, _sh=shuffled) -> tuple:
                k = tables.key(p)
                if k not in _sh:
                    _sh[k] = _pool[_rnd.randrange(len(_pool))]
                return _sh[k]
            arms["mcts_shuffled"] = _replays(tb, "mcts", cfg, s.seeds, recommend=shuf)
        res[t] = arms
        root_sp = tb.outcome(search_root(t, s.space)).speedup
        for sd in range(s.seeds):
            row = {"task": t, "seed": sd, "optimum": opt, "root": root_sp}
            for a, rs in arms.items():
                r = rs[sd]
                row[f"{a}_best"] = r.best_speedup
                row[f"{a}_reach95"] = search.evals_to_reach(r.curve, 0.95 * opt, s.budget)
                row[f"{a}_reach90"] = search.evals_to_reach(r.curve, 0.90 * opt, s.budget)
                row[f"{a}_plateau"] = bool(r.best_speedup <= 1.05 * root_sp) if r.best_speedup == r.best_speedup else True
                row[f"{a}_book_s"] = r.bookkeeping_s
            per_run.append(row)
    P = {k: np.array([r[k] for r in per_run]) for k in per_run[0]} if per_run else {}
    out: dict[str, Estimate] = {}
    hit_m = (P["mcts_reach95"] <= s.budget).astype(float)
    hit_g = (P["greedy_reach95"] <= s.budget).astype(float)
    hit_r = (P["random_reach95"] <= s.budget).astype(float)
    out["k6_share_mcts_minus_greedy"] = _paired_boot(hit_m, hit_g, s.n_boot)
    out["k6_share_mcts"] = proportion_estimate(int(hit_m.sum()), len(hit_m))
    out["k6_share_greedy"] = proportion_estimate(int(hit_g.sum()), len(hit_g))
    out["k6_share_random"] = proportion_estimate(int(hit_r.sum()), len(hit_r))
    ctx.data["k6_share_by_task"] = {
        t: {a: float(np.mean([r[f"{a}_reach95"] <= s.budget for r in per_run if r["task"] == t]))
            for a in ("mcts", "greedy", "random")} for t in tbs}
    ctx.data["k6_best_over_optimum_by_task"] = {
        t: {a: float(np.median([r[f"{a}_best"] / r["optimum"] for r in per_run if r["task"] == t]))
            for a in ("mcts", "greedy", "random")} for t in tbs}
    d = np.log(P["mcts_best"]) - np.log(P["greedy_best"])
    out["k6_wilcoxon_p"] = Estimate.exact(_wil(wilcoxon, P["mcts_best"], P["greedy_best"], "greedy"), n=len(d))
    gm = bootstrap_ci(d, np.mean, n_boot=s.n_boot) if len(d) > 1 else Estimate.exact(float(d.mean()))
    out["k6_geomean_ratio_mcts_over_greedy"] = Estimate(math.exp(gm.value), math.exp(gm.lo), math.exp(gm.hi), n=gm.n,
                                                        method="bootstrap of mean log ratio, exp")
    out["k7_evals95_log_minus_linear"] = _paired_boot(P["mcts_reach95"], P["mcts_linear_reach95"], s.n_boot)
    out["k8_wilcoxon_p"] = Estimate.exact(_wil(wilcoxon, P["mcts_unguided_reach90"], P["mcts_reach90"], "greater"),
                                          n=len(d))
    out["k8_evals90_unguided_minus_guided"] = _paired_boot(P["mcts_unguided_reach90"], P["mcts_reach90"], s.n_boot)
    if "mcts_shuffled_reach90" in P:
        out["k8_shuffled_p"] = Estimate.exact(_wil(wilcoxon, P["mcts_shuffled_reach90"], P["mcts_unguided_reach90"],
                                                   "two-sided"), n=len(d))
    out["k10_plateau_guided_minus_unguided"] = _paired_boot(P["mcts_plateau"].astype(float),
                                                            P["mcts_unguided_plateau"].astype(float), s.n_boot)
    out["k10_plateau_guided"] = Estimate.exact(float(P["mcts_plateau"].mean()), n=len(d))
    out["k10_plateau_unguided"] = Estimate.exact(float(P["mcts_unguided_plateau"].mean()), n=len(d))
    k4 = _k4(tbs, s.n_boot)
    out.update(k4.pop("metrics"))
    ctx.data["k4"] = k4
    book = np.array([r["mcts_book_s"] for r in per_run])
    ctx.data["kp5_mcts_bookkeeping_s_per_search"] = float(book.mean())
    if s.k13:
        out.update(_k13(s, c, cfg, ctx))
    curves = {t: {a: [list(map(_f, r.curve)) for r in rs] for a, rs in arms.items()} for t, arms in res.items()}
    ctx.data.update({"runs": per_run, "curves": curves, "optima": {t: tb.optimum() for t, tb in tbs.items()},
                     "tables": {t: {"meta": tb.meta, "rows": [{k: v for k, v in r.items()
                                                              if k not in ("hot", "cand_samples", "ref_samples")}
                                                             for r in tb.rows.values()]} for t, tb in tbs.items()},
                     "budget": s.budget, "arm_note": "library generator, replay over measured tables"})
    return out


def _f(x: float) -> float | None:
    return None if x != x else float(x)


def search_root(task: str, space: str) -> Any:
    from agentmill.methods.kernelpro.library import root

    return root(task, space)


def _wil(wilcoxon: Any, a: np.ndarray, b: np.ndarray, alt: str) -> float:
    """Paired Wilcoxon p; 1.0 when every pair ties (no evidence either way)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.allclose(a, b):
        return 1.0
    alternative = "greater" if alt in ("greater", "greedy") else alt
    return float(wilcoxon(a, b, alternative=alternative, zero_method="wilcox").pvalue)


def _k4(tbs: dict[str, Any], n_boot: int) -> dict[str, Any]:
    """ScalarFallback vs the action path's ground truth (reduction tasks: no fast-math ⇒ strict in-order scalar
    reduction), and the gain of its recommended action (fast-math) looked up in the table."""
    from agentmill.methods.kernelpro.tables import key

    tp = fp = fn = tn = 0
    gains, invisible = [], []
    for t in ("sum", "softmax_rows", "layernorm"):
        if t not in tbs:
            continue
        tb = tbs[t]
        unflagged = [r["t_cand"] for r in tb.rows.values() if r["status"] == "correct" and not r.get("scalar_fallback")]
        med_unflagged = float(np.median(unflagged)) if unflagged else float("nan")
        for r in tb.rows.values():
            if r["status"] != "correct":
                continue
            truth = int(r["params"].get("fm", 0)) == 0
            flag = bool(r.get("scalar_fallback"))
            tp += truth and flag
            fp += flag and not truth
            fn += truth and not flag
            tn += not truth and not flag
            if flag:
                # "invisible" to throughput metrics: as fast (within 20 %) as a typical unflagged candidate
                invisible.append(abs(med_unflagged / r["t_cand"] - 1) <= 0.2)
                nb = tb.rows.get(key({**r["params"], "fm": 1}))
                if nb and nb["status"] == "correct":
                    gains.append(nb["speedup"] / r["speedup"])
    rec = tp / (tp + fn) if tp + fn else float("nan")
    prec = tp / (tp + fp) if tp + fp else float("nan")
    g = bootstrap_ci(np.array(gains), np.median, n_boot=n_boot) if len(gains) > 1 else Estimate.exact(float("nan"))
    return {"metrics": {"k4_recall": Estimate.exact(rec, n=tp + fn), "k4_precision": Estimate.exact(prec, n=tp + fp),
                        "k4_action_median_gain": g,
                        "k4_invisible_share": Estimate.exact(float(np.mean(invisible)) if invisible else float("nan"),
                                                             n=len(invisible))},
            "confusion": {"tp": tp, "fp": fp, "fn": fn, "tn": tn}, "gains": gains}


def _k13(s: Setup, c: Any, cfg: Any, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.kernelpro import tables

    # the k13 space is the task's 48-point quick sub-space plus the exploit action: both tables measure that one
    sub = "quick" if s.space == "full" else s.space
    honest = tables.build(s.k13_task, sub, ceilings=c, progress=ctx.progress)
    ex = tables.build(s.k13_task, sub, ceilings=c, exploits=("skip_work", "cache_output"), include_honest=False,
                      progress=ctx.progress)
    merged = tables.MeasuredTable(s.k13_task, "k13", {**honest.rows, **ex.rows}, {**honest.meta, "k13": True})
    shares = {}
    for arm, wall_on in (("wall", True), ("nowall", False)):
        runs = _replays(merged, "mcts", cfg, s.seeds, wall_on=wall_on)
        shares[arm] = float(np.mean([r.best_exploit for r in runs]))
        ctx.data[f"k13_{arm}_best"] = [{"speedup": _f(r.best_speedup), "exploit": r.best_exploit,
                                        "params": dict(r.best)} for r in runs]
    ctx.data["k13_exploit_rows"] = [{k: v for k, v in r.items() if k in ("params", "status", "failed_check",
                                                                          "speedup", "kb_allclose")}
                                    for r in ex.rows.values()]
    return {"k13_nowall_exploit_share": Estimate.exact(shares["nowall"], n=s.seeds),
            "k13_wall_exploit_share": Estimate.exact(shares["wall"], n=s.seeds)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    curves = data["curves"]
    fig, axes = plt.subplots(1, len(curves), figsize=(3.2 * len(curves), 3), squeeze=False)
    for ax, (t, arms) in zip(axes[0], curves.items()):
        opt = data["optima"][t]
        for a in ("mcts", "greedy", "random", "mcts_unguided"):
            if a in arms:
                m = np.nanmean(np.array([[np.nan if v is None else v for v in c] for c in arms[a]], float), axis=0)
                ax.plot(range(1, len(m) + 1), m / opt, label=a)
        ax.axhline(1.0, color="k", lw=0.8, ls="--", label="exhaustive optimum")
        ax.set_title(t, fontsize=8)
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best / optimum")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    p = out / "kernelpro_search.png"
    save(fig, p)
    paths.append(p)
    return paths


EXPERIMENT = Experiment(
    id="e177.kernelpro_search",
    quick_budget_s=10,
    quick_check=QUICK_CHECK,
    parallel_safe=False,
    title="E177 KernelPro: MCTS vs greedy vs random against exhaustively measured tables",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="A 160–320-point transformation library per task, C backend (the paper: an LLM writing CUDA for "
               "KernelBench on A100/H100); budget 40 evaluations, 20 seeds × 4 tasks, replay over tables measured "
               "on this machine; one thread.",
)
