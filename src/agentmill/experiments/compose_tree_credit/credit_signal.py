"""Claims (a) and (b) of the composition on one environment: what tree rollouts give G2PO-style credit at equal
generated tokens (shared by ``signal_keydoor`` and ``signal_textworld``).

Per seed, every task gets one group from each sampler, both grown by InfoTree's sampler with the same budget of
generated environment actions: a tree (UUCB selector, a branch point at every step) and independent rollouts (the
``independent`` selector). The behaviour policy is E165's ε-oracle (ε = 0.85: mostly uniform over admissible
commands, sometimes a shortest-plan move), so both samplers act alike and progress labels (the oracle distance to the
goal fell) exist for every step. Units of the intervals: seeds (each a fresh draw of every group), paired across
arms by seed.

(a) ``merge`` = share of table rows whose state node (group, description, inventory) has >= 2 visits;
``informative`` = share of rows whose G2PO-style advantage is non-zero (|A| > 1e-9, ``adapter.INFORMATIVE_TOL``).
Both as ratios tree / independent (ratio of means over seeds, paired bootstrap), claim: lower bound > 1.
(b) AUROC of the step advantage for oracle progress over all labelled rows of a seed: tree+G2PO − independent+G2PO
(non-inferiority, lower bound > −0.02) and independent+G2PO − independent+GRPO (lower bound > 0). Diagnostic
(``auroc_once_*``, no claim): the same AUROC over generated rows only, each sampled step once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, auroc, mean_estimate, paired_diff
from agentmill.envs.rollout import EpsilonOraclePolicy
from agentmill.experiments.compose_tree_credit.adapter import (
    INFORMATIVE_TOL,
    CreditConfig,
    RolloutSpec,
    merge_mask,
    sample_groups,
    step_advantages,
)
from agentmill.experiments.compose_tree_credit.tasks import EnvFactory, make_tasks, max_steps
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, RunContext

ARMS = ("tree_g2po", "indep_g2po", "indep_grpo", "tree_grpo")
"""(sampler, estimator) pairs scored for AUROC; the claims use the first three."""


@dataclass(frozen=True)
class Setup:
    env: str = "keydoor"
    """"keydoor" or "textworld"."""
    n_tasks: int = 8
    """Tasks (calibrated layouts or games); one group per task per seed and sampler."""
    task_seed: int = 0
    """First layout seed (KeyDoor) or tw-make seed (TextWorld)."""
    seeds: tuple[int, ...] = tuple(range(1000, 1020))
    """Rollout seeds (the bootstrap units); claim seeds start at 1000, seed 1 was the adapter's development seed."""
    budget: int = 160
    """Generated environment actions per group, equal for both samplers [R]."""
    epsilon: float = 0.85
    """ε of the ε-oracle behaviour policy (E165 G-3's value)."""
    n_boot: int = 2000
    """Bootstrap resamples over seeds."""


def claims(env: str, tag: str) -> tuple[Claim, ...]:
    src = "composition [R]: InfoTree (arXiv:2605.05262) + G2PO (arXiv:2606.22995); threshold set by the lead"
    return (
        Claim(f"{tag}-a-merge", f"{env}: at equal generated actions, tree rollouts raise the merge rate (share of "
              "steps whose state node has ≥ 2 visits) over independent rollouts: ratio tree/independent ≥ 1 with "
              "95 % CI lower bound > 1.", src, "—", "merge_ratio", ">=", 1.0, ci_bound=1.0),
        Claim(f"{tag}-a-informative", f"{env}: at equal generated actions, tree rollouts raise the share of "
              "informative (non-zero G2PO-style advantage) steps: ratio tree/independent ≥ 1 with 95 % CI lower "
              "bound > 1.", src, "—", "informative_ratio", ">=", 1.0, ci_bound=1.0),
        Claim(f"{tag}-b-noninferior", f"{env}: advantage AUROC for oracle progress, tree+G2PO − independent+G2PO, "
              "is non-inferior (95 % CI lower bound > −0.02).", src, "—", "auroc_diff_tree_indep_g2po", ">=", -0.02,
              ci_bound=-0.02),
        Claim(f"{tag}-b-graph", f"{env}: advantage AUROC for oracle progress, independent+G2PO − independent+GRPO "
              "(plain outcome advantage), is positive (95 % CI lower bound > 0).", src, "—",
              "auroc_diff_indep_g2po_grpo", ">=", 0.0, ci_bound=0.0),
    )


def measure_signal(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    tasks = make_tasks(s.env, s.n_tasks, s.task_seed, ctx.work_dir)
    factory = EnvFactory(s.env)
    policy = EpsilonOraclePolicy(s.epsilon)
    per: dict[str, list[float]] = {}
    for j, seed in enumerate(s.seeds):
        ctx.progress(f"{s.env} seed {seed}", j, len(s.seeds))
        for sampler in ("tree", "indep"):
            spec = RolloutSpec(budget=s.budget, max_steps=max_steps(s.env),
                               selector="uucb" if sampler == "tree" else "independent")
            g = sample_groups(factory, policy, tasks, spec, seed)
            adv = {est: step_advantages(g.table, CreditConfig(est))["advantages"] for est in ("g2po", "grpo")}
            rows = np.flatnonzero(g.labels.progress >= 0)
            pos = g.labels.progress[rows] == 1
            add = per.setdefault
            add(f"{sampler}_merge", []).append(float(merge_mask(g.table).mean()))
            for est in ("g2po", "grpo"):
                nz = np.abs(adv[est]) > INFORMATIVE_TOL
                add(f"{sampler}_informative_{est}", []).append(float(nz.mean()))
                add(f"{sampler}_informative_per_token_{est}", []).append(float(nz.sum() / max(g.gen_tokens, 1)))
                add(f"auroc_{sampler}_{est}", []).append(auroc(adv[est][rows], pos))
                # diagnostic: each generated step once (the row of the leaf that sampled it), no prefix repeats
                once = np.flatnonzero((g.labels.progress >= 0) & g.generated)
                add(f"auroc_once_{sampler}_{est}", []).append(
                    auroc(adv[est][once], g.labels.progress[once] == 1))
            add(f"{sampler}_gen_tokens", []).append(float(g.gen_tokens))
            add(f"{sampler}_rows", []).append(float(len(g.table)))
            add(f"{sampler}_leaves", []).append(float(g.table.n_trajectories))
            add(f"{sampler}_success", []).append(float(g.table.success[g.table.traj_starts].mean()))
    A = {k: np.asarray(v) for k, v in per.items()}
    many = len(s.seeds) >= 2
    out: dict[str, Estimate] = {}

    def ratio(a: np.ndarray, b: np.ndarray) -> Estimate:
        return paired_diff(a, b, stat="ratio", n_boot=s.n_boot) if many else Estimate.exact(a.mean() / b.mean())

    def diff(a: np.ndarray, b: np.ndarray) -> Estimate:
        return paired_diff(a, b, stat="diff", n_boot=s.n_boot) if many else Estimate.exact(float((a - b).mean()))

    out["merge_ratio"] = ratio(A["tree_merge"], A["indep_merge"])
    out["informative_ratio"] = ratio(A["tree_informative_g2po"], A["indep_informative_g2po"])
    out["informative_ratio_grpo"] = ratio(A["tree_informative_grpo"], A["indep_informative_grpo"])
    out["informative_per_token_ratio"] = ratio(A["tree_informative_per_token_g2po"],
                                               A["indep_informative_per_token_g2po"])
    out["auroc_diff_tree_indep_g2po"] = diff(A["auroc_tree_g2po"], A["auroc_indep_g2po"])
    out["auroc_diff_indep_g2po_grpo"] = diff(A["auroc_indep_g2po"], A["auroc_indep_grpo"])
    out["auroc_diff_tree_g2po_grpo"] = diff(A["auroc_tree_g2po"], A["auroc_tree_grpo"])
    out["auroc_once_diff_tree_indep_g2po"] = diff(A["auroc_once_tree_g2po"], A["auroc_once_indep_g2po"])
    for k, v in A.items():
        if k.startswith(("auroc_", "tree_", "indep_")):
            out[k] = mean_estimate(v, n_boot=s.n_boot) if many else Estimate.exact(float(v[0]))
    ctx.data["per_seed"] = {k: v.tolist() for k, v in A.items()}
    ctx.data["env"] = s.env
    return out


def plot_signal(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    P = {k: np.asarray(v, dtype=float) for k, v in data["per_seed"].items()}
    env = data.get("env", "")
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    names = ["tree", "indep"]
    for ax, est in zip(axes, ("g2po", "grpo")):
        vals = [P[f"{n}_informative_per_token_{est}"] for n in names]
        ax.bar(names, [v.mean() for v in vals], yerr=[v.std(ddof=1) if v.size > 1 else 0 for v in vals], capsize=4,
               color=["tab:green", "tab:gray"])
        ax.set_title(f"informative steps per generated action ({est.upper()})", fontsize=9)
        ax.set_ylabel("informative rows / generated action")
    fig.suptitle(f"{env}: tree vs independent rollouts at equal generated actions (mean ± sd over seeds)", fontsize=9)
    fig.tight_layout()
    paths.append(save(fig, out / f"{env}_informative_per_token.png"))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    arms = [a for a in ARMS if f"auroc_{a}" in P]
    vals = [P[f"auroc_{a}"] for a in arms]
    ax.bar(arms, [np.nanmean(v) for v in vals], yerr=[np.nanstd(v, ddof=1) if v.size > 1 else 0 for v in vals],
           capsize=4, color=["tab:green", "tab:blue", "tab:gray", "tab:olive"][: len(arms)])
    ax.axhline(0.5, color="gray", lw=0.8, ls=":")
    ax.set_ylim(0.4, 1.0)
    ax.set_ylabel("AUROC of the step advantage for oracle progress")
    ax.set_title(f"{env}: advantage quality by arm (mean ± sd over seeds)", fontsize=9)
    fig.tight_layout()
    paths.append(save(fig, out / f"{env}_advantage_auroc.png"))
    return paths
