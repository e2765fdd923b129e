"""C-tree-credit (c) on TextWorld: learning at equal samples, tabular softmax policies (``learning`` holds the
measurement). TextWorld plays ~100 steps/s, so it is judged at full only."""

from __future__ import annotations

from dataclasses import replace

from agentmill.experiments.compose_tree_credit import PAPER
from agentmill.experiments.compose_tree_credit.learning import Setup, claims, measure_learning, plot_learning
from agentmill.experiments.protocol import Experiment

# Budget-bound [R]: TextWorld resets in ~0.13 s and steps in ~9 ms here, a tree group costs ~3 s, so full trains
# the claim's two arms only (tree+G2PO without progress is reported on KeyDoor), 6 seeds × 5 iterations × 1 group.
BASE = Setup(env="textworld", n_tasks=2, task_seed=1000, seeds=tuple(range(1000, 1006)), iterations=5,
             tasks_per_iter=1, budget=160, eval_every=2, eval_episodes=4, arms=("indep_grpo", "tree_g2po_progress"))

SETUPS = {
    "smoke": replace(BASE, n_tasks=1, seeds=(1000,), iterations=1, tasks_per_iter=1, budget=20, eval_every=1,
                     eval_episodes=1),
    "quick": replace(BASE, n_tasks=1, seeds=(1000,), iterations=1, tasks_per_iter=1, budget=20, eval_every=1,
                     eval_episodes=1),
    "full": BASE,
}

EXPERIMENT = Experiment(
    id="compose_tree_credit.learning_textworld",
    quick_budget_s=10,
    parallel_safe=True,
    quick_check="TextWorld learning (~100 steps/s) is judged at full only; quick runs one iteration as a pipeline "
                "check",
    title="C-tree-credit (c) TextWorld: tree + G2PO-style (+ progress) vs independent + GRPO learning at equal samples",
    paper=PAPER,
    claims=claims("TextWorld", "TC-TW"),
    setups=SETUPS,
    measure=measure_learning,
    plots=plot_learning,
    requires=frozenset({"textworld"}),
    scale_note="TextWorld: 2 calibrated tw-make custom games (E165 G-7's first two), 40 steps, tabular softmax "
               "policy keyed by (game, description, inventory), one group of 160 generated actions per iteration, "
               "lr 1.0, progress β = 1.0; full 6 seeds × 5 iterations, the claim's two arms only. LM policy arm not "
               "built. The papers train LLM agents.",
)
