"""E167 W-1: continual pre-training on transitions helps beyond SFT alone.

Tiny byte model from random init; arms with equal total optimiser steps: CPT (whole episodes of 160 disjoint
layouts + a manual) then SFT, against SFT only. Metric: rule field-F1 of greedy predictions on held-out test
transitions (half changed), paired per item. Negative control (reported, ``controls=true``): SFT on targets shuffled
within action verbs, beside the copy-previous baseline on the same items.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.learning import delta, plot_dims, stage_rows
from agentmill.experiments.e167_world_model.stages import SCALE, TINY_SPEC, mean_ci, wm_config
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    pipeline: str = "full"
    """Which cached pipeline config (smoke / quick / full)."""
    wm: str = TINY_SPEC
    """The world-model arm."""
    controls: bool = False
    """Also train and score the shuffled-target control."""
    n_boot: int = 10_000
    """Bootstrap resamples."""


SETUPS = {"smoke": Setup(pipeline="smoke", n_boot=200), "quick": Setup(pipeline="quick", n_boot=500),
          "full": Setup()}

CLAIMS = (
    Claim("E167-W1", "CPT on transitions then SFT predicts next states better than SFT alone with the same total "
          "steps (Δ field-F1 on held-out transitions).", "[P] CPT injects dynamics", "— (no ablation number public)",
          "w1_delta_f1", ">=", 0.03, ci_bound=0.0),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.judges import field_f1

    a = stage_rows(s.pipeline, "cpt_sft", ctx)
    b = stage_rows(s.pipeline, "sft_only", ctx)
    exs = P.eval_examples(wm_config(s.pipeline))
    copy = [field_f1(KeyDoorDomain(), e.obs, e.next_obs) for e in exs]
    clusters = [r["task_id"] for r in a]
    out = {"w1_delta_f1": delta(a, b, "f1", s.n_boot),
           "f1_cpt_sft": mean_ci([r["f1"] for r in a], clusters, n_boot=s.n_boot),
           "f1_sft_only": mean_ci([r["f1"] for r in b], clusters, n_boot=s.n_boot),
           "f1_copy_previous": mean_ci(copy, clusters, n_boot=s.n_boot)}
    if s.controls:
        c = stage_rows(s.pipeline, "shuffled_sft", ctx)
        out["f1_shuffled_sft"] = mean_ci([r["f1"] for r in c], clusters, n_boot=s.n_boot)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    return plot_dims(data, out, "w1_dims.png", "W-1: fidelity by dimension, CPT→SFT vs SFT only")


EXPERIMENT = Experiment(
    id="e167.wm_cpt_vs_sft",
    quick_budget_s=20,
    title="E167 W-1: continual pre-training on transitions helps beyond SFT alone (tiny world model)",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick trains the pipeline for a few steps only (cached, shared by every e167 learning run); the "
                "verdict is the full profile's",
    scale_note=SCALE + " CPT 100 steps × 8 windows of 256 tokens, then SFT 800 steps × 8 examples, vs SFT only "
                       "900 steps.",
)
