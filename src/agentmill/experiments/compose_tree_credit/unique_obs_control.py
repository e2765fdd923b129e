"""C-tree-credit negative control: with ``UniqueObsWrapper`` (no state repeats across steps) the graph term should
vanish and tree+G2PO advantages equal tree+GRPO advantages exactly (max |Δ| == 0).

KeyDoor under ``UniqueObsWrapper(p=1)``: every generated step gets a fresh request tag, so no two generated steps
share a state. A tree's shared prefix is still one state seen once: every leaf through it repeats its rows with the
same observation, so at a branch node (≥ 2 distinct successors) the TD error can be non-zero. Beside the claim the
run reports where the difference sits: max |Δ| on rows whose state node has a single successor (the graph term
should vanish there up to floating point), on branch-node rows, and on independent rollouts under the same wrapper
(no shared prefix at all; E165 G-4a's setting through this adapter).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.envs.rollout import EpsilonOraclePolicy
from agentmill.experiments.compose_tree_credit import PAPER
from agentmill.experiments.compose_tree_credit.adapter import (
    KEY,
    CreditConfig,
    RolloutSpec,
    sample_groups,
    step_advantages,
)
from agentmill.experiments.compose_tree_credit.tasks import EnvFactory, make_tasks, max_steps
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.g2po import G2POConfig, build_state_graph


@dataclass(frozen=True)
class Setup:
    n_tasks: int = 8
    """Calibrated KeyDoor layouts, one group per task per seed."""
    seeds: tuple[int, ...] = tuple(range(1000, 1010))
    """Rollout seeds."""
    budget: int = 160
    """Generated actions per group."""
    epsilon: float = 0.85
    """ε-oracle behaviour policy."""


SETUPS = {
    "smoke": Setup(n_tasks=2, seeds=(1000,), budget=40),
    "quick": Setup(seeds=(1000, 1001)),
    "full": Setup(),
}

CLAIMS = (
    Claim("TC-NC", "KeyDoor under UniqueObsWrapper(p=1): tree+G2PO-style advantages equal tree+GRPO advantages "
          "exactly (max |Δ| == 0): the graph term vanishes without repeated states.",
          "composition [R]; E165's no-repeat property (docs/methods/g2po.md); test set by the lead", "—",
          "tree_max_abs_diff", "<=", 0.0, judge_on="exact",
          exact_why="an identity checked on every row of the sampled tables: a maximum absolute difference compared "
                    "with 0, no sampling uncertainty in the identity"),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    tasks = make_tasks("keydoor", s.n_tasks, 0, ctx.work_dir)
    factory = EnvFactory("keydoor", unique_p=1.0)
    policy = EpsilonOraclePolicy(s.epsilon)
    acc: dict[str, list[float]] = {}
    for j, seed in enumerate(s.seeds):
        ctx.progress(f"seed {seed}", j, len(s.seeds))
        for sampler, selector in (("tree", "uucb"), ("indep", "independent")):
            g = sample_groups(factory, policy, tasks, RolloutSpec(s.budget, max_steps("keydoor"), selector=selector),
                              seed)
            d = np.abs(step_advantages(g.table, CreditConfig("g2po"))["advantages"]
                       - step_advantages(g.table, CreditConfig("grpo"))["advantages"])
            acc.setdefault(f"{sampler}_max", []).append(float(d.max()))
            if sampler == "tree":
                graph = build_state_graph(g.table, KEY, gamma=G2POConfig().gamma)
                n_succ = np.bincount(graph.edge_src, minlength=len(graph.node_keys))
                branch = n_succ[graph.node_of_row] >= 2
                acc.setdefault("tree_branch_rows", []).append(float(branch.mean()))
                acc.setdefault("tree_max_nonbranch", []).append(float(d[~branch].max()) if (~branch).any() else 0.0)
                acc.setdefault("tree_max_branch", []).append(float(d[branch].max()) if branch.any() else 0.0)
                acc.setdefault("tree_nonzero_share", []).append(float((d > 0).mean()))
                acc.setdefault("tree_nonzero_at_branch", []).append(
                    float((d[branch] > 1e-9).sum() / max((d > 1e-9).sum(), 1)))
    out = {"tree_max_abs_diff": Estimate.exact(max(acc["tree_max"]), n=len(s.seeds)),
           "indep_max_abs_diff": Estimate.exact(max(acc["indep_max"]), n=len(s.seeds)),
           "tree_max_abs_diff_nonbranch_rows": Estimate.exact(max(acc["tree_max_nonbranch"])),
           "tree_max_abs_diff_branch_rows": Estimate.exact(max(acc["tree_max_branch"])),
           "tree_branch_row_share": Estimate.exact(float(np.mean(acc["tree_branch_rows"]))),
           "tree_nonzero_diff_share": Estimate.exact(float(np.mean(acc["tree_nonzero_share"]))),
           "tree_share_of_diffs_at_branch_rows": Estimate.exact(float(np.mean(acc["tree_nonzero_at_branch"])))}
    ctx.data["per_seed"] = acc
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    acc = data["per_seed"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    names = ["tree: branch rows", "tree: other rows", "independent"]
    vals = [np.max(acc["tree_max_branch"]), np.max(acc["tree_max_nonbranch"]), np.max(acc["indep_max"])]
    ax.bar(names, np.maximum(vals, 1e-18), color=["tab:red", "tab:green", "tab:gray"])
    ax.set_yscale("log")
    ax.set_ylabel("max |A_G2PO − A_GRPO| (floored at 1e-18)")
    ax.set_title("UniqueObs control: where the graph term survives", fontsize=9)
    fig.tight_layout()
    return [save(fig, out / "unique_obs_control.png")]


EXPERIMENT = Experiment(
    id="compose_tree_credit.unique_obs_control",
    quick_budget_s=5,
    parallel_safe=True,
    title="C-tree-credit NC: under UniqueObs tree+G2PO-style equals tree+GRPO exactly?",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="KeyDoor (8 calibrated layouts) under UniqueObsWrapper(p=1), ε-oracle (ε = 0.85), 160 generated "
               "actions per group, InfoTree UUCB trees; quick 2 seeds, full 10.",
)
