"""E175 CX-4 on SmolLM2: the SFT tool sibling (model organism) — SmolLM2-135M-Instruct + LoRA — passes its gates
before any claim reads it.

The sibling is trained (or found in its content-addressed cache) by
:func:`agentmill.methods.crosscoder.sibling.build_tool_sibling`; the gates are measured on the test split (unseen
request templates and values; greedy, cap 64 new tokens), SmolLM2 base vs sibling: sibling strict_format ≥ 0.80 and
tool_exact ≥ 0.60 on 200 tool prompts; base strict_format ≤ 0.05; sibling opens ``<tool_call>`` on ≤ 0.10 of
generic prompts. Decoy and bare tag rates are reported, not gated. The tiny-pair arm of CX-4 is
``e175.crosscoder_organism_gate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import gate_bars
from agentmill.experiments.protocol import Claim, Experiment, RunContext

SUBSTRATE = "SmolLM2-135M-Instruct (base) vs SFT tool sibling (model organism: SmolLM2-135M + LoRA)"


@dataclass(frozen=True)
class Setup:
    plan_only: bool = False
    """Record the plan; load and train nothing (quick and smoke: no model load)."""
    n_test: int = 200
    """Test tool prompts (100 decoy, bare and generic each)."""
    max_new: int = 64
    """Greedy cap in tokens."""
    seed: int = 0


SETUPS = {"smoke": Setup(plan_only=True), "quick": Setup(plan_only=True), "full": Setup()}

CLAIMS = (
    Claim("CX-4-smollm2", "The SmolLM2 SFT tool sibling is a valid instrument: all four gates pass (share of gates "
          "passed).", f"[R] gates; substrate: {SUBSTRATE}", "—", "cx4_gates_passed_share", ">=", 1.0,
          judge_on="exact", exact_why="a fixed battery of four pass/fail gates on a fixed seeded test split with "
          "greedy decoding"),
)


def metrics_from_gates(g: dict[str, Any]) -> dict[str, Estimate]:
    """Claim metric and the four gate values with Clopper–Pearson intervals (decoy / bare tag rates reported)."""
    checks = [g["sibling_strict_format"] >= 0.80, g["sibling_tool_exact"] >= 0.60, g["base_strict_format"] <= 0.05,
              g["sibling_generic_tag_rate"] <= 0.10]
    n_t, n_g = g["n_tool"], g["n_generic"]
    out = {"cx4_gates_passed_share": Estimate.exact(sum(checks) / 4, n=4),
           "sibling_strict_format": clopper_pearson(round(g["sibling_strict_format"] * n_t), n_t),
           "sibling_tool_exact": clopper_pearson(round(g["sibling_tool_exact"] * n_t), n_t),
           "base_strict_format": clopper_pearson(round(g["base_strict_format"] * n_t), n_t),
           "sibling_generic_tag_rate": clopper_pearson(round(g["sibling_generic_tag_rate"] * n_g), n_g)}
    for k, n in (("decoy_tag_rate", "n_decoy"), ("bare_tag_rate", "n_bare")):
        if k in g:
            out[f"sibling_{k}"] = clopper_pearson(round(g[k] * g[n]), g[n])
    return out


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.crosscoder import sibling as S

    ctx.data["substrate"] = SUBSTRATE
    if setup.plan_only:
        ctx.data["plan_only"] = ("no model load outside full: the SmolLM2 tool sibling is trained (≈ 30–60 min on 2 "
                                 "shared cores, once; cached) and gated at full")
        return {}
    ctx.progress("SmolLM2 tool sibling (trained once, cached)", 0, None)
    sib = S.build_tool_sibling(S.SiblingConfig(seed=setup.seed),
                               progress=lambda d: ctx.progress("LoRA steps", d["step"], d["steps"]))
    ctx.progress("gates (greedy, test split)", 0, None)
    _, g = S.sibling_gates(sib, n_test=setup.n_test, max_new=setup.max_new, seed=setup.seed)
    ctx.read_artefact(sib.adapter / "adapter_model.safetensors")  # the weights, not the card this run updates
    ctx.data["gates"] = g | {"adapter": sib.adapter.name}
    ctx.data["gate_text"] = S.gates_text(ctx.data["gates"])
    ctx.data["card"] = {k: v for k, v in sib.card.items() if k != "losses"} | {
        "loss_first": sib.card["losses"][:5], "loss_last": sib.card["losses"][-5:]}
    ctx.data["snapshots"] = sorted(sib.snapshots)
    if g["passed"]:  # the weak checkpoint later claims start from (dev strict_format per snapshot; cached)
        ctx.progress("weak checkpoint (dev split)", 0, None)
        ctx.data["weak_checkpoint"] = S.weak_checkpoint(sib, seed=setup.seed)
    return metrics_from_gates(g)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    return gate_bars(data, out_dir / "cx4_gates_smollm2.png", "CX-4 gates (SmolLM2 tool sibling)")


EXPERIMENT = Experiment(
    id="e175.crosscoder_organism_gate_smollm2",
    title="The SmolLM2 tool sibling passes its gates (CX-4, SmolLM2 arm)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="SFT tool sibling (SmolLM2-135M + LoRA r 8 on blocks 8–29, 120 steps) vs ToolRL-Qwen2.5-3B (GRPO); "
               "20 synthetic tools, one parameter each; chat harness",
    plots=plots,
    requires=frozenset({"hf", "peft"}),
    parallel_safe=True,
    quick_budget_s=5,
    quick_check="no model load at quick (plan recorded); the sibling is trained and gated at full",
)
