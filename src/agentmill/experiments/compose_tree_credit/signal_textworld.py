"""C-tree-credit (a)+(b) on TextWorld (``credit_signal`` holds the measurement). TextWorld plays ~100 steps/s and a
tree replays its branch prefixes, so only the full profile runs it; quick records nothing and says so."""

from __future__ import annotations

from dataclasses import replace

from agentmill.experiments.compose_tree_credit import PAPER
from agentmill.experiments.compose_tree_credit.credit_signal import Setup, claims, measure_signal, plot_signal
from agentmill.experiments.protocol import Experiment

BASE = Setup(env="textworld", n_tasks=4, task_seed=1000, seeds=tuple(range(1000, 1005)), budget=160)

SETUPS = {
    "smoke": replace(BASE, n_tasks=1, seeds=(1000,), budget=20, n_boot=50),
    "quick": replace(BASE, n_tasks=1, seeds=(1000,), budget=20, n_boot=50),
    "full": BASE,
}

EXPERIMENT = Experiment(
    id="compose_tree_credit.signal_textworld",
    quick_budget_s=10,
    parallel_safe=True,
    quick_check="TextWorld (~100 steps/s, tree prefixes replayed) is judged at full only (4 games × 5 seeds); quick "
                "plays one group per sampler as a pipeline check",
    title="C-tree-credit (a, b) TextWorld: trees give G2PO more merged and informative steps; advantage AUROC by arm",
    paper=PAPER,
    claims=claims("TextWorld", "TC-TW"),
    setups=SETUPS,
    measure=measure_signal,
    plots=plot_signal,
    requires=frozenset({"textworld"}),
    scale_note="TextWorld: 4 calibrated tw-make custom games (3 rooms, 6 objects, quest length 3; E165 G-7's), 40 "
               "steps, ε-oracle behaviour policy (ε = 0.85), 160 generated actions per group, 5 seeds (the units). "
               "The papers use LLM agents.",
)
