"""E179-S1/S2/T4 + NC-6, NC-7 on the float32 target: one user, speculation vs plain decoding in the same engine
(the measurement and its claims: ``single_user``)."""

from __future__ import annotations

from agentmill.experiments.e179_dspark import PAPER
from agentmill.experiments.e179_dspark.drafters import setup_reads
from agentmill.experiments.e179_dspark.single_user import CLAIMS, SETUPS, measure, plots
from agentmill.experiments.protocol import Experiment

EXPERIMENT = Experiment(
    quick_budget_s=260,
    id="e179.speed_single_user",
    title="DSpark single-user speedup, drafter overhead, greedy losslessness (S1, S2, T4, NC-6, NC-7)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="SmolLM2-135M fp32 on 1 CPU thread (memory-bound ≈ 15–17 tok/s) vs GPU serving of 4B–14B targets; "
               "verify cost rises steeply with block length on CPU [R], so the speedup ceiling is ≈ 4×; quick "
               "uses 3 prompts × 40 tokens, 1 repetition, arms AR, dspark-async, fixed:7 and the random "
               "drafter (at T = 1 AR and dspark-async only).",
    requires=frozenset({"hf"}),
    plots=plots,
    reads=setup_reads,
)
