"""C-tree-credit (a)+(b) on KeyDoor: merge rate, informative steps and advantage AUROC, trees vs independent rollouts
at equal generated actions (``credit_signal`` holds the measurement)."""

from __future__ import annotations

from agentmill.experiments.compose_tree_credit import PAPER
from agentmill.experiments.compose_tree_credit.credit_signal import Setup, claims, measure_signal, plot_signal
from agentmill.experiments.protocol import Experiment

SETUPS = {
    "smoke": Setup(n_tasks=2, seeds=(1000,), budget=40, n_boot=50),
    "quick": Setup(seeds=tuple(range(1000, 1006))),
    "full": Setup(),
}

EXPERIMENT = Experiment(
    id="compose_tree_credit.signal_keydoor",
    quick_budget_s=10,
    parallel_safe=True,
    title="C-tree-credit (a, b) KeyDoor: trees give G2PO more merged and informative steps; advantage AUROC by arm",
    paper=PAPER,
    claims=claims("KeyDoor", "TC-KD"),
    setups=SETUPS,
    measure=measure_signal,
    plots=plot_signal,
    scale_note="KeyDoor (6 rooms, 2 locks, trap, loops; 8 calibrated layouts), ε-oracle behaviour policy (ε = 0.85) "
               "for both samplers, 160 generated actions per group; InfoTree's UUCB sampler with a branch point at "
               "every step vs its independent selector; G2PO-style defaults; seeds are the units (quick 6, full 20). "
               "The papers use LLM agents (tool use, ALFWorld/AppWorld).",
)
