"""Claim (c) of the composition: learning at equal samples with tree rollouts + G2PO-style credit (+ the progress
advantage) vs independent rollouts + GRPO, tabular softmax policies (shared by ``learning_keydoor`` and
``learning_textworld``).

Every iteration each arm grows ``tasks_per_iter`` groups with InfoTree's sampler, ``budget`` generated environment
actions each (equal samples), computes its step advantages with ``adapter.step_advantages`` and takes one
``envs.policies.pg_step`` (lr 1.0, normalize="trajectories": E165 G-7's choices). Arms:

- ``indep_grpo``: independent rollouts, GRPO outcome advantage (the baseline);
- ``tree_g2po_progress``: tree rollouts, G2PO-style advantage plus β·log(π/π_ref), β = 1.0 (E173's default),
  π_ref = the initial (uniform) policy — the composition;
- ``tree_g2po``: tree rollouts, G2PO-style advantage alone.

Evaluation: the sampled policy's success over ``eval_episodes`` episodes spread over the tasks, at fixed seeds that
depend only on (seed, evaluation point). AUC = mean of the success curve. Claim: AUC(tree_g2po_progress) >
AUC(indep_grpo), paired over seeds, one-sided Wilcoxon p < 0.05.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.stats import Estimate, mean_estimate, paired_diff
from agentmill.envs.policies import SoftmaxTablePolicy, pg_step
from agentmill.envs.rollout import collect_groups
from agentmill.experiments.compose_tree_credit.adapter import CreditConfig, RolloutSpec, sample_groups, step_advantages
from agentmill.experiments.compose_tree_credit.tasks import EnvFactory, make_tasks, max_steps
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, RunContext

ARMS = {"indep_grpo": ("independent", "grpo", 0.0), "tree_g2po_progress": ("uucb", "g2po", 1.0),
        "tree_g2po": ("uucb", "g2po", 0.0)}
"""arm -> (InfoTree selector, estimator, β of the progress advantage)."""
EXACT_P = "a test's p-value over the fixed seeds; its noise is inside the test"


@dataclass(frozen=True)
class Setup:
    env: str = "keydoor"
    """"keydoor" or "textworld"."""
    n_tasks: int = 8
    """Tasks (calibrated layouts or games)."""
    task_seed: int = 0
    """First layout seed (KeyDoor) or tw-make seed (TextWorld)."""
    seeds: tuple[int, ...] = tuple(range(1000, 1012))
    """Training seeds (the Wilcoxon pairs)."""
    iterations: int = 20
    """Policy updates per arm."""
    tasks_per_iter: int = 4
    """Groups per iteration."""
    budget: int = 160
    """Generated environment actions per group, equal for every arm."""
    lr: float = 1.0
    """Step size of every arm (E165 G-7's single rate)."""
    eval_every: int = 5
    """Iterations between evaluations (and one at the end)."""
    eval_episodes: int = 32
    """Evaluation episodes per point, spread over the tasks."""
    arms: tuple[str, ...] = tuple(ARMS)
    """Arms to train (``ARMS`` keys); the claim needs ``tree_g2po_progress`` and ``indep_grpo``."""


def claims(env: str, tag: str) -> tuple[Claim, ...]:
    return (
        Claim(f"{tag}-c", f"{env}: at equal samples, tree rollouts + G2PO-style credit + progress advantage learn "
              "faster than independent rollouts + GRPO (success-curve AUC, tabular softmax policy, paired over "
              "seeds, one-sided Wilcoxon p < 0.05).",
              "composition [R]: InfoTree (arXiv:2605.05262) + G2PO (arXiv:2606.22995) + progress advantage "
              "(arXiv:2606.26080); test set by the lead", "—", "wilcoxon_p", "<=", 0.05, judge_on="exact",
              exact_why=EXACT_P),
    )


def _evaluate(factory: Any, policy: Any, tasks: list[Any], episodes: int, steps: int, seed: int) -> float:
    per_task = max(1, -(-episodes // len(tasks)))
    table, _, _ = collect_groups(factory, policy, tasks, per_task, steps, seed=seed)
    return float(table.success[table.traj_starts].mean())


def train_arm(arm: str, s: Setup, tasks: list[Any], seed: int) -> dict[str, Any]:
    """One (arm, seed) run: its success curve and per-iteration diagnostics."""
    selector, estimator, beta = ARMS[arm]
    factory = EnvFactory(s.env)
    steps = max_steps(s.env)
    policy = SoftmaxTablePolicy()
    reference = policy.clone()
    spec = RolloutSpec(budget=s.budget, max_steps=steps, selector=selector)
    order = np.random.default_rng(derive_seed(seed, "tree-credit-tasks")).permutation(
        np.resize(np.arange(len(tasks)), s.iterations * s.tasks_per_iter + len(tasks)))
    curve, points, gen, train_success = [], [], [], []
    t0 = time.perf_counter()
    for it in range(s.iterations + 1):
        if it % s.eval_every == 0 or it == s.iterations:
            curve.append(_evaluate(factory, policy, tasks, s.eval_episodes, steps,
                                   derive_seed(seed, "tree-credit-eval", it)))
            points.append(it)
        if it == s.iterations:
            break
        batch = [tasks[i] for i in order[it * s.tasks_per_iter:(it + 1) * s.tasks_per_iter]]
        g = sample_groups(factory, policy, batch, spec, derive_seed(seed, "tree-credit-train", it))
        adv = step_advantages(g.table, CreditConfig(estimator, beta=beta), policy=policy, reference=reference)
        pg_step(policy, g.table, adv["advantages"], s.lr, normalize="trajectories")
        gen.append(g.gen_tokens)
        train_success.append(float(g.table.success[g.table.traj_starts].mean()))
    return {"curve": curve, "points": points, "gen_tokens": gen, "train_success": train_success,
            "auc": float(np.mean(curve)), "seconds": time.perf_counter() - t0}


def measure_learning(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from scipy.stats import wilcoxon

    unknown = sorted(set(s.arms) - set(ARMS))
    if unknown or not {"tree_g2po_progress", "indep_grpo"} <= set(s.arms):
        raise ValueError(f"arms must be among {tuple(ARMS)} and include the claim's two, got {s.arms}")
    tasks = make_tasks(s.env, s.n_tasks, s.task_seed, ctx.work_dir)
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in s.arms}
    total = len(s.seeds) * len(s.arms)
    for j, seed in enumerate(s.seeds):
        for k, arm in enumerate(s.arms):
            ctx.progress(f"{s.env} seed {seed} {arm}", j * len(s.arms) + k, total)
            runs[arm].append(train_arm(arm, s, tasks, seed))
    auc = {a: np.array([r["auc"] for r in runs[a]]) for a in s.arms}
    many = len(s.seeds) >= 2
    out: dict[str, Estimate] = {}
    for a in s.arms:
        out[f"auc_{a}"] = mean_estimate(auc[a]) if many else Estimate.exact(float(auc[a][0]))
        out[f"gen_tokens_per_iter_{a}"] = Estimate.exact(float(np.mean([np.mean(r["gen_tokens"]) for r in runs[a]])))
    for a, b in (("tree_g2po_progress", "indep_grpo"), ("tree_g2po", "indep_grpo"),
                 ("tree_g2po_progress", "tree_g2po")):
        if a not in auc or b not in auc:
            continue
        d = auc[a] - auc[b]
        out[f"auc_diff_{a}_{b}"] = paired_diff(auc[a], auc[b]) if many else Estimate.exact(float(d[0]))
        p = float(wilcoxon(auc[a], auc[b], alternative="greater").pvalue) if many and np.any(d != 0) else 1.0
        name = "wilcoxon_p" if (a, b) == ("tree_g2po_progress", "indep_grpo") else f"wilcoxon_p_{a}_{b}"
        out[name] = Estimate.exact(p, n=len(d))
    ctx.data["runs"] = {a: [{k: v for k, v in r.items()} for r in rs] for a, rs in runs.items()}
    ctx.data["seeds"] = list(s.seeds)
    ctx.data["env"] = s.env
    return out


ARM_COLORS = {"indep_grpo": "tab:gray", "tree_g2po_progress": "tab:green", "tree_g2po": "tab:blue"}


def draw_curves(runs: dict[str, list[dict[str, Any]]], path: Path, *, ylabel: str, title: str,
                title_size: int = 9) -> Path:
    """Each arm's mean success per iteration with a 95 % CI band over seeds, its mean AUC in the legend."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm, rs in runs.items():
        if not rs:
            continue
        x = np.array(rs[0]["points"])
        Y = np.array([r["curve"] for r in rs], dtype=float)
        m = Y.mean(0)
        half = 1.96 * Y.std(0, ddof=1) / np.sqrt(len(rs)) if len(rs) > 1 else np.zeros_like(m)
        ax.plot(x, m, "o-", color=ARM_COLORS.get(arm), label=f"{arm} (AUC {np.mean([r['auc'] for r in rs]):.3f})")
        ax.fill_between(x, m - half, m + half, color=ARM_COLORS.get(arm), alpha=0.15)
    ax.set_xlabel("iteration (equal generated actions per iteration for every arm)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def plot_learning(data: dict[str, Any], out: Path) -> list[Path]:
    env = data.get("env", "")
    return [draw_curves(data["runs"], out / f"{env}_learning_curves.png", ylabel="sampled-policy success",
                        title=f"{env}: learning curves, tabular softmax policy (mean ± 95 % CI over seeds)")]
