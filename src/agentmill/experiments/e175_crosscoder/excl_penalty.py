"""E175 CX-11: penalising the exclusive shelf hurts A's reconstruction-routed behaviour [P].

Two E175-faithful crosscoders (``CrossCoderConfig.e175``: TopK, no normalisation, E175's loss terms) with
partition (0.05, 0.05), identical but for λ_excl ∈ {0, 10⁻³}, trained on (weak checkpoint, base). Each routes the
weak sibling's last-prompt activation through its dictionary (``route(view=A)``, joint encoding with B's activation
on the same tokens, as CX-5). Metric: lax_tool(A-recon, λ_excl = 0) − lax_tool(A-recon, λ_excl = 10⁻³) on the test
tool prompts, paired bootstrap over prompts. Claim: ≥ +5 pp with CI > 0.
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


SETUPS = {"smoke": Setup(**SMOKE), "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

ARMS = {"free": "E175p05_free", "penalised": "E175p05"}
"""λ_excl = 0 and λ_excl = 10⁻³ (pairbench arch names)."""

CLAIMS = (
    Claim("CX-11", "Routing the weak sibling through a crosscoder trained without the exclusive-block penalty "
          "(λ_excl = 0) gives ≥ 5 pp more lax tool correctness than through one trained with λ_excl = 10⁻³.",
          f"[P] E175 λ_excl ablation; substrate: {CLAIM_SUBSTRATE}, weak checkpoint, E175 recipe p = 0.05",
          "routed correctness 34.8 % (λ_excl = 0) vs 25.8 % (penalised)", "cx11_free_minus_penalised_lax_tool",
          ">=", 0.05, ci_bound=0.0),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if setup.plan_only:
        return plan(ctx, "CX-11 (λ_excl penalty)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    harness = b.harnesses[0]  # CX-5's primary harness (raw on SmolLM2)
    ctx.data["harness"] = harness
    runs: dict[str, Any] = {}
    for arm, arch in ARMS.items():
        runs[arm] = run_routing(b, arch, harness=harness, clean=runs["free"]["clean"] if runs else None)
    ctx.data["table"] = {arm: {k: {"clean": float(r["clean"][k].mean()), "recon": float(r["recon"][k].mean())}
                               for k in ("lax_tool", "strict_format", "tool_exact")} for arm, r in runs.items()}
    out = {"cx11_free_minus_penalised_lax_tool": paired(runs["free"]["recon"]["lax_tool"],
                                                        runs["penalised"]["recon"]["lax_tool"]),
           "cx11_free_minus_penalised_strict_format": paired(runs["free"]["recon"]["strict_format"],
                                                             runs["penalised"]["recon"]["strict_format"])}
    for arm, r in runs.items():
        out[f"cx11_delta_lax_tool_{arm}"] = paired(r["recon"]["lax_tool"], r["clean"]["lax_tool"])
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "table" not in data:
        return []
    plt = pyplot()
    t = data["table"]
    fig, ax = plt.subplots(figsize=(4.5, 3))
    arms = list(t)
    ax.bar([0] + [i + 1 for i in range(len(arms))], [t[arms[0]]["lax_tool"]["clean"]]
           + [t[a]["lax_tool"]["recon"] for a in arms], color=["#999999", "#4477aa", "#cc6677"][:len(arms) + 1])
    ax.set_xticks(range(len(arms) + 1), ["clean"] + [f"recon, {a}" for a in arms])
    ax.set_ylabel("lax tool correctness")
    ax.set_title("CX-11: λ_excl = 0 vs 1e-3")
    return [save(fig, out_dir / "cx11_excl_penalty.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_excl_penalty",
    title="Penalising the exclusive block hurts routed tool use (CX-11)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (weak checkpoint), E175 recipe at 1,024 latents and 1,500 "
                "steps vs ToolRL-Qwen2.5-3B; raw harness (as CX-5); tiny_tool_pair if the sibling fails "
                "its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
