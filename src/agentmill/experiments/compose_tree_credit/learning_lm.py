"""C-tree-credit (c) on KeyDoor, LM-policy arm: tree + G2PO-style (+ progress) vs independent + GRPO, trained as a
SmolLM2-135M-Instruct candidate policy with LoRA.

The LM twin of ``learning_keydoor`` (same claim rule) on the tiny KeyDoor of the LM-pair experiments
(``envs.keydoor.TINY_WORLD``: 3 rooms, 1 lock, a trap, 20 steps). One loaded model serves every (arm, seed):
``lm.candidate_pair.build_pair`` gives a ``LoRACandidatePolicy`` (a fresh LoRA: r 8, α 16, q/v; AdamW lr 1e-4 [R], as
E165's LoRA check) and its fixed reference (the adapter switched off, π_θ = π_ref at the start); ``reset()`` restores
the initial weights and a fresh optimizer before each run, so the arms share initial weights, task order and rollout
seeds and differ only in how groups are grown and credited. Arms:

- ``indep_grpo``: independent rollouts, GRPO outcome advantage (the baseline);
- ``tree_g2po_progress``: InfoTree UUCB trees, G2PO-style advantage plus β·log(π/π_ref), β = 1.0 (E173's default),
  π_ref = the adapter-off model — the composition.

Every iteration each arm grows ``tasks_per_iter`` groups of exactly ``budget`` generated actions (``adapter.
grow_group`` tops both arms up to the budget), computes its step advantages with ``adapter.step_advantages`` and
takes one autograd policy-gradient step (``LoRACandidatePolicy.pg_update``, normalize="trajectories": E165's choice).
A tree repeats its shared prefix rows in every leaf through them; rows with the same prompt and action are merged
into one (their advantages summed, the normaliser unchanged), which gives the same gradient with one forward per
distinct (state, action) instead of one per repeated row.

Evaluation: the sampled policy's success on held-out layouts (seeds from 1000), ``heldout_rollouts`` per layout, at
seeds that depend only on (seed, evaluation point). AUC = mean of the held-out success curve. Claim: AUC
(tree_g2po_progress) > AUC(indep_grpo), paired over seeds, one-sided Wilcoxon p < 0.05; the full profile has 5 seeds
(minimum attainable p 0.5^5 = 0.031). Quick and smoke are pipeline checks with an untrained ``tiny:`` model and record
the claim's number unjudged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.stats import Estimate, mean_estimate, paired_diff
from agentmill.envs.keydoor import TINY_WORLD, KeyDoorEnv, layouts
from agentmill.envs.rollout import collect_groups
from agentmill.experiments.compose_tree_credit import PAPER
from agentmill.experiments.compose_tree_credit.adapter import CreditConfig, RolloutSpec, sample_groups, step_advantages
from agentmill.experiments.compose_tree_credit.learning import EXACT_P, draw_curves
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, unjudged

ARMS = {"indep_grpo": ("independent", "grpo", 0.0), "tree_g2po_progress": ("uucb", "g2po", 1.0)}
"""arm -> (InfoTree selector, estimator, β of the progress advantage)."""


@dataclass(frozen=True)
class Setup:
    model: str = "hf:smollm2"
    """``hf:NAME`` (LoRA on the policy side of an HFPair) or ``tiny:SPEC`` (every weight trained)."""
    temperature: float = 1.0
    """Candidate-softmax temperature."""
    one_shot: bool = True
    """One-shot example in the prompt (SmolLM2 needs it)."""
    lr: float = 1e-4
    """AdamW step size (1e-4 [R], as ``lm.policy.LoRACandidatePolicy`` and E165's LoRA check)."""
    n_train_layouts: int = 4
    """Tiny KeyDoor training layouts (seeds from 0, uncalibrated, as E165's LoRA check)."""
    n_test_layouts: int = 4
    """Held-out layouts (seeds from 1000)."""
    seeds: tuple[int, ...] = tuple(range(1000, 1005))
    """Training seeds (the Wilcoxon pairs); 5 is the fewest whose one-sided Wilcoxon can reach p < 0.05."""
    iterations: int = 1
    """Policy updates per arm. One SmolLM2 update of a 64-action group costs ~45-60 s on one loaded CPU thread
    (~14 distinct (state, action) rows with a nonzero advantage, ~3-4.5 s each; timed 2026-11-29), so 5 seeds × 2
    arms × 1 update fill the 12-minute budget."""
    tasks_per_iter: int = 1
    """Groups per iteration."""
    budget: int = 64
    """Generated environment actions per group, equal for both arms (above 2 × ``max_steps``, so the tree can branch
    after its 2 seed rollouts)."""
    max_steps: int = 20
    """Steps per episode (TINY_WORLD's 20)."""
    eval_every: int = 1
    """Iterations between held-out evaluations (and one at the end)."""
    heldout_rollouts: int = 1
    """Evaluation rollouts per held-out layout at each evaluation point."""
    threads: int = 1
    """Torch threads during the run (1: the cores are shared)."""
    share_initial_eval: bool = True
    """Measure the iteration-0 held-out success once per seed and give it to both arms (same weights, same
    evaluation seeds)."""


SETUPS = {
    "smoke": Setup(model="tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=1", temperature=100.0, one_shot=False,
                   lr=1e-3, n_train_layouts=1, n_test_layouts=1, seeds=(1000,), iterations=1, budget=16, max_steps=6,
                   eval_every=1, heldout_rollouts=1),
    # quick: a pipeline check of the LM training path with an untrained tiny model (≤ 10 s), never judged
    "quick": Setup(model="tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=1", temperature=100.0, one_shot=False,
                   lr=1e-3, n_test_layouts=2, seeds=(1000, 1001), iterations=2, budget=64, heldout_rollouts=2),
    "full": Setup(),
}

CLAIMS = (
    Claim("TC-KD-c-LM", "KeyDoor (tiny), LM policy: at equal samples, tree rollouts + G2PO-style credit + progress "
          "advantage learn faster than independent rollouts + GRPO (held-out success-curve AUC, SmolLM2-135M-Instruct "
          "+ LoRA, paired over 5 seeds, one-sided Wilcoxon p < 0.05).",
          "composition [R]: InfoTree (arXiv:2605.05262) + G2PO (arXiv:2606.22995) + progress advantage "
          "(arXiv:2606.26080); the tabular claim's rule, set by the lead", "—", "wilcoxon_p", "<=", 0.05,
          judge_on="exact", exact_why=EXACT_P),
)


def merge_repeated_rows(policy: Any, table: Any, advantages: np.ndarray) -> np.ndarray:
    """Advantages with every group of rows sharing (prompt ids, candidates, action) summed onto its first row and the
    others set to 0 (``pg_update`` skips zero rows). Σ_rows A·∇log π is unchanged, so with the same normaliser the
    gradient is the same; a tree's repeated prefix rows then cost one forward each. Shape (S,)."""
    out = np.zeros(len(table))
    first: dict[tuple[Any, ...], int] = {}
    for i in range(len(table)):
        cands = policy.candidates_of(table.info[i], table.candidates[i])
        key = (tuple(policy.prompt_ids(table.obs[i], table.info[i], cands)), cands, table.action[i])
        j = first.setdefault(key, i)
        out[j] += float(advantages[i])
    return out


def _evaluate(factory: Any, policy: Any, tasks: list[Any], per_task: int, steps: int, seed: int) -> float:
    table, _, _ = collect_groups(factory, policy, tasks, per_task, steps, seed=seed)
    return float(table.success[table.traj_starts].mean())


def train_arm(arm: str, s: Setup, pair: Any, train: list[Any], test: list[Any], seed: int,
              initial_eval: float | None = None) -> dict[str, Any]:
    """One (arm, seed) run from the pair's initial weights: its held-out success curve and diagnostics.

    ``initial_eval``: the iteration-0 held-out success another arm of this seed measured. Before any update every arm
    of a seed has the same weights and the same evaluation seeds, so that number is this arm's too; passing it skips
    replaying those episodes (with it the paired AUC difference at iteration 0 is exactly 0, as it is in
    expectation without it)."""
    selector, estimator, beta = ARMS[arm]
    factory = partial(KeyDoorEnv, config=TINY_WORLD)
    policy = pair.policy.reset()
    spec = RolloutSpec(budget=s.budget, max_steps=s.max_steps, selector=selector)
    order = np.random.default_rng(derive_seed(seed, "tree-credit-lm-tasks")).permutation(
        np.resize(np.arange(len(train)), s.iterations * s.tasks_per_iter + len(train)))
    curve: list[float] = []
    points: list[int] = []
    gen: list[int] = []
    train_success: list[float] = []
    rows: list[int] = []
    update_rows: list[int] = []
    secs = {"eval": 0.0, "rollout": 0.0, "advantages": 0.0, "update": 0.0}
    t0 = time.perf_counter()
    for it in range(s.iterations + 1):
        if it % s.eval_every == 0 or it == s.iterations:
            t = time.perf_counter()
            curve.append(initial_eval if it == 0 and initial_eval is not None else _evaluate(
                factory, policy, test, s.heldout_rollouts, s.max_steps, derive_seed(seed, "tree-credit-lm-eval", it)))
            points.append(it)
            secs["eval"] += time.perf_counter() - t
        if it == s.iterations:
            break
        batch = [train[i] for i in order[it * s.tasks_per_iter:(it + 1) * s.tasks_per_iter]]
        t = time.perf_counter()
        g = sample_groups(factory, policy, batch, spec, derive_seed(seed, "tree-credit-lm-train", it))
        t1 = time.perf_counter()
        adv = step_advantages(g.table, CreditConfig(estimator, beta=beta), policy=policy, reference=pair.reference)
        merged = merge_repeated_rows(policy, g.table, adv["advantages"])
        t2 = time.perf_counter()
        policy.pg_update(g.table, merged, lr=s.lr, normalize="trajectories")
        t3 = time.perf_counter()
        secs["rollout"] += t1 - t
        secs["advantages"] += t2 - t1
        secs["update"] += t3 - t2
        gen.append(g.gen_tokens)
        rows.append(len(g.table))
        update_rows.append(int(np.count_nonzero(merged)))
        train_success.append(float(g.table.success[g.table.traj_starts].mean()))
    return {"curve": curve, "points": points, "gen_tokens": gen, "train_success": train_success, "rows": rows,
            "update_rows": update_rows, "auc": float(np.mean(curve)), "seconds": time.perf_counter() - t0,
            "phase_seconds": secs}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch
    from scipy.stats import wilcoxon

    from agentmill.lm.candidate_pair import build_pair

    threads = torch.get_num_threads()
    torch.set_num_threads(int(s.threads))
    try:
        pair = build_pair(s.model, temperature=s.temperature, one_shot=s.one_shot, lr=s.lr, memo=4096)
        train = layouts(s.n_train_layouts, seed=0, calibrate=None, config=TINY_WORLD)
        test = layouts(s.n_test_layouts, seed=1000, calibrate=None, config=TINY_WORLD)
        runs: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
        total = len(s.seeds) * len(ARMS)
        for j, seed in enumerate(s.seeds):
            for k, arm in enumerate(ARMS):
                ctx.progress(f"LM seed {seed} {arm}", j * len(ARMS) + k, total)
                shared = runs[next(iter(ARMS))][-1]["curve"][0] if k > 0 and s.share_initial_eval else None
                runs[arm].append(train_arm(arm, s, pair, train, test, seed, shared))
    finally:
        torch.set_num_threads(threads)
    auc = {a: np.array([r["auc"] for r in runs[a]]) for a in ARMS}
    many = len(s.seeds) >= 2
    out: dict[str, Estimate] = {}
    for a in ARMS:
        out[f"auc_{a}"] = mean_estimate(auc[a]) if many else Estimate.exact(float(auc[a][0]))
        out[f"final_success_{a}"] = Estimate.exact(float(np.mean([r["curve"][-1] for r in runs[a]])))
        out[f"gen_tokens_per_iter_{a}"] = Estimate.exact(float(np.mean([np.mean(r["gen_tokens"]) for r in runs[a]])))
        out[f"update_rows_per_iter_{a}"] = Estimate.exact(float(np.mean([np.mean(r["update_rows"])
                                                                         for r in runs[a]])))
        out[f"seconds_per_run_{a}"] = Estimate.exact(float(np.mean([r["seconds"] for r in runs[a]])))
    d = auc["tree_g2po_progress"] - auc["indep_grpo"]
    out["auc_diff_tree_g2po_progress_indep_grpo"] = (paired_diff(auc["tree_g2po_progress"], auc["indep_grpo"])
                                                     if many else Estimate.exact(float(d[0])))
    p = (float(wilcoxon(auc["tree_g2po_progress"], auc["indep_grpo"], alternative="greater").pvalue)
         if many and np.any(d != 0) else 1.0)
    out["wilcoxon_p"] = Estimate.exact(p, n=len(d))
    out["seeds_favouring_tree"] = Estimate.exact(float(np.sum(d > 0)), n=len(d))
    ctx.data["runs"] = runs
    ctx.data["seeds"] = list(s.seeds)
    ctx.data["model"] = s.model
    if not s.model.startswith("hf:"):
        return unjudged(out, ("wilcoxon_p",), "untrained tiny: stand-in model, a pipeline check of the LM training "
                        "path; the verdict needs hf:smollm2 (full)", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    return [draw_curves(data["runs"], out / "keydoor_lm_learning_curves.png",
                        ylabel="held-out sampled-policy success", title_size=8,
                        title=f"tiny KeyDoor: LM learning curves ({data.get('model', '?')} + LoRA; mean ± 95 % CI "
                              f"over {len(data.get('seeds', []))} seeds)")]


EXPERIMENT = Experiment(
    id="compose_tree_credit.learning_lm",
    quick_budget_s=10,
    parallel_safe=True,  # torch on one thread, no time judged: it may share the cores
    title="C-tree-credit (c) KeyDoor, LM policy: tree + G2PO-style (+ progress) vs independent + GRPO learning "
          "(SmolLM2 + LoRA)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"hf", "peft"}),
    reads=models_read("model"),
    scale_note="Tiny KeyDoor (3 rooms, 1 lock, trap, 20 steps), SmolLM2-135M-Instruct CandidatePolicy + a fresh LoRA "
               "(r 8, α 16, q/v, AdamW 1e-4) per (arm, seed), groups of 64 generated actions for both arms, progress "
               "β = 1.0 against the adapter-off model; full 5 seeds × 1 iteration (one update) × 1 group on 4 training "
               "layouts, held-out success on 4 layouts × 1 rollout at iterations 0 and 1 (sized to ≤ 12 CPU "
               "minutes; a learning curve of two points, far too short to expect a difference). The "
               "papers train 1.5B-7B models for hundreds of steps on GPUs. Quick/smoke: an untrained tiny model at "
               "T = 100, never judged.",
)
