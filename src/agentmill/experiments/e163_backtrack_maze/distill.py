"""E163-R5f/g: distilling RLVR traces transfers backtracking; stripping the recoveries does not (arXiv:2606.22938 [A];
setup and thresholds [R]).

For each (W, K, L) config and seed: train a REINFORCE teacher from the uniform base, sample 2 000 successful
traces (horizon 20·T*), and fit two fresh uniform students by maximum likelihood:
- on every (state, action) pair of the traces (R5f: T_distill / T_teacher <= 1.2), and
- on each trace's last segment only, from the last hub departure to the target, i.e. with the recoveries removed
  (R5g / NC6: T_distill_stripped / T_SFT >= 0.9; the review's reading that the value is in the recoveries).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.stats import Estimate, bootstrap_ci
from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.experiments.e163_backtrack_maze import PAPER
from agentmill.experiments.e163_backtrack_maze.maze_configs import parse_configs
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.backtrack_maze import (TabularPolicy, collect_traces, fit_student, hitting_time, optimal_time,
                                              train_rlvr_reinforce, train_sft)


@dataclass(frozen=True)
class Setup:
    configs: str = "4,5,2;4,6,2;4,4,3"
    """(W,K,L) triples, ';'-separated (the three R5d configs [R])."""
    seeds: int = 5
    """Teacher seeds per config (teacher, traces and students all follow the seed)."""
    reinforce_episodes: int = 12_000
    """REINFORCE episodes per teacher [R] (docs/papers.md E163)."""
    n_traces: int = 2000
    """Successful teacher traces (2 000 [R] (docs/papers.md E163))."""
    distill_steps: int = 1000
    """Adam steps of maximum-likelihood distillation [R]."""
    sft_steps: int = 2000
    """Adam steps of the SFT reference [R] (docs/papers.md E163)."""
    lr: float = 0.1
    """Adam learning rate everywhere [R] (docs/papers.md E163)."""
    seed: int = 1000
    """Base seed (claim runs use seeds >= 1000)."""


SETUPS = {
    "smoke": Setup(configs="2,3,2", seeds=1, reinforce_episodes=640, n_traces=200, distill_steps=200,
                   sft_steps=200),
    "quick": Setup(seeds=1),
    "full": Setup(),
}

CLAIMS = (
    Claim("E163-R5f", "Distilling RLVR traces into the base model transfers backtracking: T_distill / T_teacher, "
          "mean over seeds, worst config (CI from a bootstrap over seeds).", "[P] E163 abstract",
          "distillation works [S]", "r5f_ratio", "<=", 1.2),
    Claim("E163-R5g", "NC6: the same traces with the recoveries removed (last hub departure to target only) do "
          "not transfer it: T_distill_stripped / T_SFT, mean over seeds, best config.",
          "[Rev] the recoveries carry the value", "not reported", "r5g_ratio", ">=", 0.9),
)


def _unit(args: tuple[int, int, int, int, Setup]) -> dict[str, Any]:
    W, K, L, i, s = args
    env = PathStarMultigraph(W, K, L)
    teacher = TabularPolicy(W, K, L)
    train_rlvr_reinforce(teacher, env, episodes=s.reinforce_episodes, lr=s.lr,
                         seed=derive_seed(s.seed, "teacher", W, K, L, i))
    traces = collect_traces(teacher, env, s.n_traces, seed=derive_seed(s.seed, "traces", W, K, L, i))
    student, log_full = fit_student(env, traces.hub_counts, traces.arm_counts, traces.n, s.distill_steps, s.lr)
    stripped, log_strip = fit_student(env, traces.seg_hub_counts, traces.seg_arm_counts, traces.n,
                                      s.distill_steps, s.lr)
    sft = TabularPolicy(W, K, L)
    train_sft(sft, env, steps=s.sft_steps, lr=s.lr)
    T = {name: hitting_time(p).value for name, p in
         (("teacher", teacher), ("distill", student), ("stripped", stripped), ("sft", sft))}
    # Backward-facing (state, action) pairs in the data: present in whole traces, and in the stripped segments
    # only where the teacher went back and then forward again within the goal arm.
    bwd_full = float(traces.arm_counts[:, 1, :].sum() / traces.n)
    bwd_strip = float(traces.seg_arm_counts[:, 1, :].sum() / traces.n)
    return {"W": W, "K": K, "L": L, "seed": i, "T_teacher": T["teacher"], "T_distill": T["distill"],
            "T_distill_stripped": T["stripped"], "T_sft": T["sft"], "T_opt": optimal_time(W, K),
            "r5f": T["distill"] / T["teacher"], "r5g": T["stripped"] / T["sft"],
            "trace_mean_steps": traces.mean_steps, "trace_attempts": traces.attempts,
            "bwd_pairs_per_trace": bwd_full, "bwd_pairs_per_stripped_trace": bwd_strip,
            "teacher": teacher.summary(), "student": student.summary(), "stripped": stripped.summary(),
            "grad_bwd_max_full": log_full.grad_bwd_max, "grad_bwd_max_stripped": log_strip.grad_bwd_max}


def _worst(per_config: list[Estimate], worst: str) -> Estimate:
    """The worst config's side of every interval. ``n`` is the fewest independent units (seeds) behind any config's
    interval, not the number of configs: three 1-seed "intervals" are still no interval."""
    f = max if worst == "max" else min
    return Estimate(f(e.value for e in per_config), f(e.lo for e in per_config), f(e.hi for e in per_config),
                    n=min(e.n for e in per_config), method=f"{worst} over configs of {per_config[0].method}")


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    cfgs = parse_configs(s.configs)
    if s.seeds < 1 or s.n_traces < 1:
        raise ValueError(f"seeds and n_traces must be >= 1, got {s.seeds}, {s.n_traces}")
    units = [(W, K, L, i, s) for W, K, L in cfgs for i in range(s.seeds)]
    done = [0]

    def tick(_i: int, _r: Any) -> None:
        done[0] += 1
        ctx.progress("teacher, traces, students", done[0], len(units))

    ctx.progress("teacher, traces, students", 0, len(units))
    rows = ctx.executor.map(_unit, units, on_result=tick)
    f_cfg, g_cfg = [], []
    for W, K, L in cfgs:
        rs = [r for r in rows if (r["W"], r["K"], r["L"]) == (W, K, L)]
        f_cfg.append(bootstrap_ci([r["r5f"] for r in rs], n_boot=10_000, seed=s.seed))
        g_cfg.append(bootstrap_ci([r["r5g"] for r in rs], n_boot=10_000, seed=s.seed))
    ctx.data.update({"rows": rows, "configs": [list(c) for c in cfgs]})
    return {
        "r5f_ratio": _worst(f_cfg, "max"),
        "r5g_ratio": _worst(g_cfg, "min"),
        "T_teacher_over_opt_max": Estimate.exact(max(r["T_teacher"] / r["T_opt"] for r in rows), n=len(rows)),
        "distill_grad_bwd_max": Estimate.exact(min(r["grad_bwd_max_full"] for r in rows), n=len(rows)),
        "stripped_bwd_pairs_per_trace": Estimate.exact(float(np.mean([r["bwd_pairs_per_stripped_trace"]
                                                                      for r in rows])), n=len(rows)),
    }


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    cfgs = [tuple(c) for c in data["configs"]]
    arms = [("T_sft", "SFT"), ("T_teacher", "RLVR teacher"), ("T_distill", "distilled"),
            ("T_distill_stripped", "distilled, recoveries stripped"), ("T_opt", "optimum K(2W-1)")]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    width = 0.8 / len(arms)
    for a, (key, label) in enumerate(arms):
        means = []
        for c in cfgs:
            vals = [r[key] for r in data["rows"] if (r["W"], r["K"], r["L"]) == c]
            means.append(float(np.exp(np.mean(np.log(vals)))))
        ax.bar(np.arange(len(cfgs)) + a * width, means, width, label=label)
    ax.set_xticks(np.arange(len(cfgs)) + 0.4 - width / 2)
    ax.set_xticklabels([f"W={W} K={K} L={L}" for W, K, L in cfgs])
    ax.set_yscale("log")
    ax.set_ylabel("expected steps (exact; geometric mean over seeds)")
    ax.set_title("Distillation of RLVR traces: whole traces vs recoveries stripped")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "maze_distill.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e163.maze_distill",
    quick_budget_s=50,
    parallel_safe=True,
    title="E163 maze: distilling RLVR traces transfers backtracking; stripped traces do not",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Tabular maze policies (numpy): REINFORCE teachers, 2 000 successful traces, maximum-likelihood "
               "students from the uniform base. Pitfall 15: in a tabular model distillation is nearly immediate; "
               "the stripped control is the informative part. All details [R] (docs/papers.md E163).",
)
