"""C-tree-credit (c) on KeyDoor: learning at equal samples, tabular softmax policies (``learning`` holds the
measurement)."""

from __future__ import annotations

from agentmill.experiments.compose_tree_credit import PAPER
from agentmill.experiments.compose_tree_credit.learning import Setup, claims, measure_learning, plot_learning
from agentmill.experiments.protocol import Experiment

SETUPS = {
    "smoke": Setup(n_tasks=2, seeds=(1000,), iterations=1, tasks_per_iter=1, budget=40, eval_every=1,
                   eval_episodes=2),
    # quick: 6 seeds (the fewest whose one-sided Wilcoxon can reach p < 0.05 with room: 1/64) × 4 iterations of 2
    # groups; runs at 8 seeds × 8 iterations × 4 groups (64 s) and 6 × 6 × 2 (26-46 s on a loaded 2-core host) were
    # over the main job's share
    "quick": Setup(seeds=tuple(range(1000, 1006)), iterations=4, tasks_per_iter=2, eval_every=2, eval_episodes=16),
    "full": Setup(seeds=tuple(range(1000, 1010)), iterations=15),
}

EXPERIMENT = Experiment(
    id="compose_tree_credit.learning_keydoor",
    quick_budget_s=15,
    parallel_safe=True,
    title="C-tree-credit (c) KeyDoor: tree + G2PO-style (+ progress) vs independent + GRPO learning at equal samples",
    paper=PAPER,
    claims=claims("KeyDoor", "TC-KD"),
    setups=SETUPS,
    measure=measure_learning,
    plots=plot_learning,
    scale_note="KeyDoor (8 calibrated layouts), tabular softmax policy keyed by (layout, description, inventory), "
               "groups of 160 generated actions for every arm, lr 1.0, progress β = 1.0 against the initial policy; "
               "quick 6 seeds × 4 iterations × 2 groups, full 10 seeds × 15 iterations × 4 groups. The LM policy "
               "arm is compose_tree_credit.learning_lm (the papers train LLM agents).",
)
