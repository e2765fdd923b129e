"""E175 CX-4: the instrument is valid — the tool sibling passes its gates before any claim reads it.

Gates (test split, greedy): sibling strict_format ≥ 0.80 and tool_exact ≥ 0.60 on tool prompts; base
strict_format ≤ 0.05; sibling opens ``<tool_call>`` on ≤ 0.10 of generic prompts. Judged on the tiny tool pair
(the planted fallback); the SmolLM2-135M LoRA sibling arm is ``e175.crosscoder_organism_gate_smollm2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import SMOKE, SUBSTRATE, Bench, PairSetup, gate_bars, plan
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    pass


SETUPS = {"smoke": Setup(**SMOKE), "quick": Setup(plan_only=True), "full": Setup()}

CLAIMS = (
    Claim("CX-4", "The tool sibling is a valid instrument: all four gates pass (share of gates passed).",
          f"[R] gates; substrate: {SUBSTRATE}", "—", "cx4_gates_passed_share", ">=", 1.0, judge_on="exact",
          exact_why="a fixed battery of four pass/fail gates on a fixed seeded test split with greedy decoding"),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if setup.plan_only:
        return plan(ctx, "CX-4 (gates)")
    b = Bench(setup, ctx)
    g = b.gates
    checks = [g.sibling_strict_format >= 0.80, g.sibling_tool_exact >= 0.60, g.base_strict_format <= 0.05,
              g.sibling_generic_tag_rate <= 0.10]
    n_t, n_g = g.n_tool, g.n_generic
    return {"cx4_gates_passed_share": Estimate.exact(sum(checks) / 4, n=4),
            "sibling_strict_format": clopper_pearson(round(g.sibling_strict_format * n_t), n_t),
            "sibling_tool_exact": clopper_pearson(round(g.sibling_tool_exact * n_t), n_t),
            "base_strict_format": clopper_pearson(round(g.base_strict_format * n_t), n_t),
            "sibling_generic_tag_rate": clopper_pearson(round(g.sibling_generic_tag_rate * n_g), n_g)}


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    return gate_bars(data, out_dir / "cx4_gates.png", "CX-4 gates (tiny tool pair)")


EXPERIMENT = Experiment(
    id="e175.crosscoder_organism_gate",
    title="The tool sibling passes its gates (CX-4)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=f"{SUBSTRATE} vs ToolRL-Qwen2.5-3B (GRPO); byte-level compact prompts, 20 synthetic tools, one "
               "harness; the SmolLM2 LoRA sibling's gates: e175.crosscoder_organism_gate_smollm2",
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
    quick_check="tool-pair work is full-only (plan recorded at quick)",
)
