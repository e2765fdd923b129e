"""E178 P-R1, P-R2: the bookkeeping is incremental, and a whole ReviewWorld search takes seconds.

P-R1: a 4,096-evaluation ReviewWorld search is run once with incremental valid-count caches; on its final ledger the
per-evaluation bookkeeping (one Thompson draw over every clade's counts, the least-measured cell of the picked node,
the node's own counts) is timed with the caches and by rescanning every record against every node's subtree (what
the public re-implementation does). Both modes must give identical counts, and a 256-evaluation search run in each
mode must give identical results. Target: rescan / incremental ≥ 20 per evaluation (geometric mean of repeats).
P-R2: wall seconds of ``search.run()`` for one 512-evaluation ReviewWorld search (world built and checked before the
clock starts). Target ≤ 2 s. Timings are of this machine; the record names its CPU.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e178_red_queen import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    big_budget: int = 4096
    repeats: int = 5
    queries_per_repeat: int = 3
    """Evaluations' worth of bookkeeping per timing repeat in rescan mode (each is slow)."""
    equal_budget: int = 256
    run_budget: int = 512
    run_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)


SETUPS = {"smoke": Setup(big_budget=256, repeats=3, queries_per_repeat=1, equal_budget=32, run_budget=64,
                         run_seeds=(0, 1)),
          "quick": Setup(),
          "full": Setup(repeats=10)}

CLAIMS = (
    Claim("P-R1", "Incremental valid-count caches make per-evaluation bookkeeping ≥ 20× cheaper than rescanning "
          "all records per node at 4,096 evaluations, with identical results.", "[R] performance target", "—",
          "pr1_speedup", ">=", 20.0),
    Claim("P-R2", "One 512-evaluation ReviewWorld search runs in ≤ 2 s.", "[R] performance target", "—",
          "pr2_run_seconds", "<=", 2.0),
)


def _bookkeeping(ledger: Any, node: int, rng: np.random.Generator) -> None:
    S, F = ledger.clade_counts()
    rng.beta(1.0 + S, 1.0 + F)
    ledger.task_counts(node)
    ledger.node_counts(node)


def _time_mode(ledger: Any, mode: str, n: int, seed: int) -> float:
    ledger.mode = mode
    rng = np.random.default_rng(seed)
    nodes = rng.integers(0, ledger.n_nodes, n)
    t0 = time.perf_counter()
    for nd in nodes:
        _bookkeeping(ledger, int(nd), rng)
    return (time.perf_counter() - t0) / n


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.red_queen import RedQueenConfig, build_review_search

    from agentmill.envs.review_world import WorldConstants

    ctx.data["world_constants"] = WorldConstants().to_dict()
    # identical results, run by run
    # every search runs on world seed 0 (its checks are computed once); the search seeds differ
    a, _, _ = build_review_search("review", RedQueenConfig(budget=s.equal_budget, seed=7), world_seed=0)
    b, _, _ = build_review_search("review", RedQueenConfig(budget=s.equal_budget, seed=7), world_seed=0,
                                  bookkeeping="rescan")
    same_run = a.run().to_dict() == b.run().to_dict()
    # the big ledger
    big, _, _ = build_review_search("review", RedQueenConfig(budget=s.big_budget, seed=11), world_seed=0)
    t0 = time.perf_counter()
    big.run()
    big_wall = time.perf_counter() - t0
    led = big.ledger
    inc_counts = [c.tolist() for c in led.clade_counts()] + [led.task_counts(i).tolist() for i in range(led.n_nodes)]
    led.mode = "rescan"
    same_counts = inc_counts == ([c.tolist() for c in led.clade_counts()]
                                 + [led.task_counts(i).tolist() for i in range(led.n_nodes)])
    ratios, inc_t, scan_t = [], [], []
    for r in range(s.repeats):
        ti = _time_mode(led, "incremental", 200, r)
        ts = _time_mode(led, "rescan", s.queries_per_repeat, r)
        inc_t.append(ti)
        scan_t.append(ts)
        ratios.append(ts / ti)
        ctx.progress("P-R1 repeats", r + 1, s.repeats)
    led.mode = "incremental"
    run_s = []
    for seed in s.run_seeds:
        search, _, _ = build_review_search("review", RedQueenConfig(budget=s.run_budget, seed=seed), world_seed=0)
        t0 = time.perf_counter()
        search.run()
        run_s.append(time.perf_counter() - t0)
        ctx.progress("P-R2 runs", len(run_s), len(s.run_seeds))
    ctx.data.update({"cpu": platform.processor() or platform.machine(), "inc_s_per_eval": inc_t,
                     "rescan_s_per_eval": scan_t, "ratios": ratios, "run_seconds": run_s, "big_nodes": led.n_nodes,
                     "big_records": len(led.records), "big_wall_s": big_wall, "same_run_result": same_run,
                     "same_counts": same_counts})
    out = {"pr2_run_seconds": repeats_estimate(run_s),
           "pr1_identical": Estimate.exact(float(same_run and same_counts)),
           "pr1_incremental_us_per_eval": repeats_estimate(np.asarray(inc_t) * 1e6),
           "pr1_rescan_ms_per_eval": repeats_estimate(np.asarray(scan_t) * 1e3)}
    if same_run and same_counts:
        out["pr1_speedup"] = repeats_estimate(ratios, log=True)
    else:
        ctx.data["precondition"] = "precondition not met: incremental and rescan bookkeeping disagree"
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.bar(["incremental", "rescan"], [np.mean(data["inc_s_per_eval"]) * 1e3, np.mean(data["rescan_s_per_eval"]) * 1e3])
    ax.set_yscale("log")
    ax.set_ylabel("bookkeeping ms per evaluation")
    ax.set_title(f"{data['big_records']} records, {data['big_nodes']} nodes", fontsize=9)
    fig.tight_layout()
    p = out / "pr1_bookkeeping.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e178.perf",
    title="E178 Red Queen: incremental bookkeeping and search wall time",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_budget_s=30,
    parallel_safe=False,
    scale_note="timings on this CPU (named in the record); one 4,096-evaluation search for P-R1, five 512-evaluation "
               "searches for P-R2; no model.",
)
