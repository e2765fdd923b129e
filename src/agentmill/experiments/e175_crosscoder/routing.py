"""E175 CX-5: routing A's activation through the dictionary raises its tool correctness (19 % → ~50 % [P]).

A = the weak checkpoint of the tiny tool sibling; ``route(view=A, positions=last_prompt)`` replaces A's block-L
output at the last prompt token by its crosscoder reconstruction, encoded jointly (B's activation on the same
tokens fills the other view, as E175's spillover patch does [R for A's side]). Metric: Δ lax_tool (and Δ
strict_format, reported) = A-recon − A-clean over the test tool prompts, paired bootstrap over prompts. Threshold:
Δ lax_tool ≥ +10 pp with CI > 0, per crosscoder (DFC and the E175-faithful recipe). One harness only (the tiny
pair has no chat template).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import (SMOKE, SUBSTRATE, Bench, PairSetup, paired, plan,
                                                              run_routing)
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    pass


SETUPS = {"smoke": Setup(**SMOKE),
          "quick": Setup(plan_only=True), "full": Setup()}

CLAIMS = tuple(
    Claim(f"CX-5-{arch}", f"Routing the weak sibling's last-prompt activation through the {arch} crosscoder raises "
          f"lax tool correctness by ≥ 10 pp.", f"[P] E175 routing; substrate: {SUBSTRATE}, weak checkpoint, {arch}",
          "19 % → 50.1 % (+31.1 ± 9.8 pp, 45/47 runs)", f"cx5_delta_lax_tool_{arch.lower()}", ">=", 0.10,
          ci_bound=0.0)
    for arch in ("DFC", "E175"))


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if setup.plan_only:
        return plan(ctx, "CX-5 (routing)")
    b = Bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: tiny tool pair failed its gates ({b.gates.text()})"
        return {}
    out: dict[str, Estimate] = {}
    table = {}
    for arch in ("DFC", "E175"):
        r = run_routing(b, arch)
        for field in ("lax_tool", "strict_format", "tool_exact"):
            key = f"cx5_delta_{field}_{arch.lower()}"
            out[key] = paired(r["recon"][field], r["clean"][field])
        table[arch] = {k: {"clean": float(r["clean"][k].mean()), "recon": float(r["recon"][k].mean())}
                       for k in ("lax_tool", "strict_format", "tool_exact", "lax_format")}
    ctx.data["table"] = table
    ctx.data["gate_note"] = b.gates.text()
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "table" not in data:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    archs = list(data["table"])
    for i, arch in enumerate(archs):
        t = data["table"][arch]
        ax.bar([i * 3, i * 3 + 1], [t["lax_tool"]["clean"], t["lax_tool"]["recon"]], color=["#999999", "#4477aa"])
    ax.set_xticks([i * 3 + 0.5 for i in range(len(archs))], [f"{a}: clean | recon" for a in archs])
    ax.set_ylabel("lax tool correctness")
    ax.set_title("CX-5: routing the weak sibling (tiny pair)")
    return [save(fig, out_dir / "cx5_routing.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_routing",
    title="Routing A through the dictionary raises tool correctness (CX-5)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=f"{SUBSTRATE} (weak checkpoint) vs ToolRL-Qwen2.5-3B; 256 latents vs 8–16k; one compact harness; "
               "SmolLM2 arm: gates only (smollm2_arm)",
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
