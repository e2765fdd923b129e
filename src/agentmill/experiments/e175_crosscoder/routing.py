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
from agentmill.experiments.e175_crosscoder.pairbench import (SMOKE, PairSetup, paired, plan,
                                                              run_routing)
from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE, SMOL, make_bench
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    pass


SETUPS = {"smoke": Setup(**SMOKE),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

CLAIMS = tuple(
    Claim(f"CX-5-{arch}", f"Routing the weak sibling's last-prompt activation through the {arch} crosscoder raises "
          f"lax tool correctness by ≥ 10 pp.",
          f"[P] E175 routing; substrate: {CLAIM_SUBSTRATE}, weak checkpoint, {arch}; raw harness",
          "19 % → 50.1 % (+31.1 ± 9.8 pp, 45/47 runs)", f"cx5_delta_lax_tool_{arch.lower()}", ">=", 0.10,
          ci_bound=0.0)
    for arch in ("DFC", "E175"))


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if setup.plan_only:
        return plan(ctx, "CX-5 (routing)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    out: dict[str, Estimate] = {}
    table: dict[str, Any] = {}
    for h_i, harness in enumerate(b.harnesses):  # the first harness is primary (raw on SmolLM2); others reported
        prefix = "cx5" if h_i == 0 else f"cx5_{harness}"
        clean = None
        for arch in ("DFC", "E175"):
            r = run_routing(b, arch, harness=harness, clean=clean)
            clean = r["clean"]
            for field in ("lax_tool", "strict_format", "tool_exact"):
                out[f"{prefix}_delta_{field}_{arch.lower()}"] = paired(r["recon"][field], r["clean"][field])
            table.setdefault(harness, {})[arch] = {
                k: {"clean": float(r["clean"][k].mean()), "recon": float(r["recon"][k].mean())}
                for k in ("lax_tool", "strict_format", "tool_exact", "lax_format")}
            ctx.progress("routing runs", len(out) // 3, 2 * len(b.harnesses))
    ctx.data["primary_harness"] = b.harnesses[0]
    ctx.data["table"] = table if len(b.harnesses) > 1 else table[b.harnesses[0]]
    ctx.data["gate_note"] = b.gates.text()
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "table" not in data:
        return []
    plt = pyplot()
    tables = data["table"] if "DFC" not in data["table"] else {"chat": data["table"]}
    fig, axes = plt.subplots(1, len(tables), figsize=(4.5 * len(tables), 3), squeeze=False)
    for ax, (harness, tab) in zip(axes[0], tables.items()):
        archs = list(tab)
        for i, arch in enumerate(archs):
            t = tab[arch]
            ax.bar([i * 3, i * 3 + 1], [t["lax_tool"]["clean"], t["lax_tool"]["recon"]],
                   color=["#999999", "#4477aa"])
        ax.set_xticks([i * 3 + 0.5 for i in range(len(archs))], [f"{a}: clean | recon" for a in archs])
        ax.set_ylabel("lax tool correctness")
        ax.set_title(f"CX-5: routing the weak sibling ({harness})", fontsize=9)
    return [save(fig, out_dir / "cx5_routing.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_routing",
    title="Routing A through the dictionary raises tool correctness (CX-5)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (weak checkpoint), block 15, 1,024 latents vs "
                "ToolRL-Qwen2.5-3B and 8–16k; raw (primary) and chat harnesses; tiny_tool_pair if the sibling "
                "fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
