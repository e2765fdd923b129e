"""E167 W-2: next-state reasoning in the SFT targets helps.

Two SFT-only arms from the same random init, same steps, same examples and batch order: targets with the template
reasoning (``<think>`` Action / Preconditions / Effects / Check, then the observation) against observation-only
targets. Metric: greedy field-F1 on the held-out transitions that changed the world, paired per item. The reasoning
is written from the privileged state diff, so a gain may come from a scratchpad format rather than from "reasoning".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.learning import delta, plot_dims, stage_rows
from agentmill.experiments.e167_world_model.stages import SCALE, TINY_SPEC
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    pipeline: str = "full"
    """Which cached pipeline config (smoke / quick / full)."""
    wm: str = TINY_SPEC
    """The world-model arm."""
    n_boot: int = 10_000
    """Bootstrap resamples."""


SETUPS = {"smoke": Setup(pipeline="smoke", n_boot=200), "quick": Setup(pipeline="quick", n_boot=500),
          "full": Setup()}

CLAIMS = (
    Claim("E167-W2", "SFT with next-state reasoning predicts changed transitions better than observation-only SFT "
          "with the same steps (Δ field-F1 on changed held-out transitions).",
          "[P] SFT with long chain-of-thought activates the dynamics; [R] template reasoning",
          "— (no ablation number public)", "w2_delta_f1_changed", ">=", 0.02, ci_bound=0.0),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    a = stage_rows(s.pipeline, "sft_only", ctx)
    b = stage_rows(s.pipeline, "sft_no_reasoning", ctx)
    ch = [i for i, r in enumerate(a) if r["changed"]]
    if len(ch) < 2:
        ctx.data["note"] = "fewer than 2 changed evaluation items"
        return {}
    a_ch, b_ch = [a[i] for i in ch], [b[i] for i in ch]
    return {"w2_delta_f1_changed": delta(a_ch, b_ch, "f1", s.n_boot),
            "w2_delta_f1_all": delta(a, b, "f1", s.n_boot),
            "w2_delta_f1_unchanged": delta([r for r in a if not r["changed"]], [r for r in b if not r["changed"]],
                                           "f1", s.n_boot)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    return plot_dims(data, out, "w2_dims.png", "W-2: fidelity by dimension, SFT with vs without reasoning")


EXPERIMENT = Experiment(
    id="e167.wm_sft_reasoning",
    quick_budget_s=8,
    title="E167 W-2: next-state reasoning in SFT targets helps (tiny world model)",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick trains the pipeline for a few steps only (cached, shared by every e167 learning run); the "
                "verdict is the full profile's",
    scale_note=SCALE + " Both arms: SFT only, 900 steps × 8 examples from the same initialisation (the "
                       "with-reasoning arm is W-1's SFT-only arm).",
)
