"""E175 CX-7: the single DFC feature matches what the plain crosscoder needs many features for [P].

Weak checkpoint of the tool sibling; DFC (BatchTopK + Partition(0.05, 0.05)) and CC (plain BatchTopK) crosscoders
on (weak, base), the same sizes as CX-6. Both rankings by Cohen's d at the last prompt token (train tool vs
generic prompts): the DFC's A-exclusive block (|S| ∈ {1, 4}), the CC's whole dictionary (|S| ∈ {1, 4, 16, 64}).
Grid α ∈ {2, 8, 32} × {last_prompt, all}, delta-mode steering encoded self_only(mean), the same selection prompts;
metric = best DFC cell gain − best CC cell gain in strict_format (paired bootstrap over prompts, 90 % CI). Claim:
equivalence within ±10 pp by TOST (the whole 90 % CI inside [−0.10, +0.10]).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import SMOKE, PairSetup, paired, plan, score
from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE, SMOL, make_bench
from agentmill.experiments.e175_crosscoder.steergrid import pick, ranked_latents, run_grid
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    n_select: int = 100
    """Selection prompts per cell (CX-6's)."""
    n_rank: int = 400
    """Train prompts per side for the rankings."""
    dfc_sizes: tuple[int, ...] = (1, 4)
    cc_sizes: tuple[int, ...] = (1, 4, 16, 64)


SETUPS = {"smoke": Setup(**SMOKE, n_select=6, n_rank=8, cc_sizes=(1, 4)),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

CLAIMS = (
    Claim("CX-7", "The best DFC steering cell (|S| ≤ 4 A-exclusive latents) is equivalent, within ±10 pp of strict "
          "format, to the best plain-crosscoder cell (|S| ≤ 64): TOST, 90 % CI of the difference inside ±0.10.",
          f"[P] E175 single feature vs plain crosscoder; substrate: {CLAIM_SUBSTRATE}, weak checkpoint, DFC vs CC",
          "one DFC latent vs many CC latents for the same effect", "cx7_dfc_minus_cc_gain", "in", -0.10,
          upper=0.10),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if setup.plan_only:
        return plan(ctx, "CX-7 (single DFC feature vs many CC features)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    a = b.weak()
    prompts = b.test["tool"][:setup.n_select]
    clean = score(b.generate(a, prompts), prompts)["strict_format"]
    ctx.data["clean_strict_format"] = float(clean.mean())
    best: dict[str, tuple[dict[str, Any], np.ndarray]] = {}
    all_cells: list[dict[str, Any]] = []
    for arch, sizes in (("DFC", setup.dfc_sizes), ("CC", setup.cc_sizes)):
        cc = b.crosscoder(arch, "weak")
        block = cc.blocks()["a_excl"] if arch == "DFC" else None
        table = ranked_latents(b, a, cc, block, setup.n_rank)
        sel = pick(table, sizes, force=setup.ignore_gates)
        ctx.data[f"ranking_{arch}"] = {"index": table.index[:10].tolist(), "cohen_d": table.cohen_d[:10].tolist(),
                                       "fire_tool": table.fire_pos[:10].tolist(),
                                       "fire_generic": table.fire_neg[:10].tolist(), "sizes_run": sorted(sel)}
        if not sel and arch == "DFC":  # nothing to compare the plain crosscoder with: skip its 24-cell grid
            ctx.data["cells"] = all_cells
            ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: no tool-leaning latent in DFC"
            return {}
        cells, per = run_grid(b, a, cc, setup.layer, sel, prompts, clean, label=arch, ctx=ctx)
        all_cells += cells
        if cells:
            i = int(np.argmax([c["gain"] for c in cells]))
            best[arch] = (cells[i], per[i])
    ctx.data["cells"] = all_cells
    if len(best) < 2:
        ctx.data["precondition"] = (f"{PRECONDITION_NOT_MET}: no tool-leaning latent in "
                                    f"{', '.join(a for a in ('DFC', 'CC') if a not in best)}")
        return {}
    ctx.data["best_cells"] = {k: v[0] for k, v in best.items()}
    return {"cx7_dfc_minus_cc_gain": paired(best["DFC"][1], best["CC"][1], level=0.90),
            "cx7_best_dfc_gain": paired(best["DFC"][1], clean),
            "cx7_best_cc_gain": paired(best["CC"][1], clean)}


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if not data.get("cells"):
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    colors = {"DFC": "#cc6677", "CC": "#4477aa"}
    for arch in ("DFC", "CC"):
        cs = [c for c in data["cells"] if c["crosscoder"] == arch]
        sizes = sorted({c["size"] for c in cs})
        ax.plot(sizes, [max(c["gain"] for c in cs if c["size"] == s) for s in sizes], "o-", color=colors[arch],
                label=f"{arch}: best cell per |S|")
    ax.set_xscale("log", base=2)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("|S| (latents steered)")
    ax.set_ylabel("Δ strict format vs clean")
    ax.set_title("CX-7: single DFC latent vs many CC latents")
    ax.legend(fontsize=7)
    return [save(fig, out_dir / "cx7_single_vs_many.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_single_vs_many",
    title="One DFC feature vs many plain-crosscoder features (CX-7)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (weak checkpoint), block 15, 1,024 latents vs "
                "ToolRL-Qwen2.5-3B; 6 cells per |S|, 100 prompts per cell; chat harness; tiny_tool_pair if the "
                "sibling fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
