"""E175 CX-13 (exploratory, no verdict): how the best steering cell depends on the layer the crosscoder reads.

For each block L in ``layers``: a DFC (BatchTopK + Partition(0.05, 0.05)) on (weak checkpoint, base) at block L,
its A-exclusive latents ranked by Cohen's d at the last prompt token (train tool vs generic), CX-6's grid (|S| ∈
{1, 4} × α ∈ {2, 8, 32} × {last_prompt, all}); recorded: the best cell's Δ strict_format per layer with its paired
bootstrap CI. The SmolLM2 design reads blocks {11, 15, 22} of 30; the tiny pair has 4 blocks, so {1, 2, 3}. No
claim: nothing here is judged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import SMOKE, PairSetup, paired, plan, score
from agentmill.experiments.e175_crosscoder.smolbench import SMOL, make_bench
from agentmill.experiments.e175_crosscoder.steergrid import pick, ranked_latents, run_grid
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup(PairSetup):
    layers: tuple[int, ...] = (1, 2, 3)
    """Blocks whose outputs the per-layer DFCs read (relative depths ≈ SmolLM2's 11, 15, 22 of 30)."""
    n_select: int = 100
    n_rank: int = 400


EXPLORATORY = "CX-13 is exploratory: no threshold is pre-registered, so the number is recorded and never judged"
CLAIMS = (
    Claim("CX-13", "Exploratory, reported only: the largest best-cell steering gain (Δ strict format) over the blocks "
          "read. Shown against CX-6's 20 pp line for reference; never judged.", "[R] exploratory (no verdict)",
          "—", "cx13_best_gain_max", ">=", 0.20),
)

SETUPS = {"smoke": Setup(**SMOKE, n_select=6, n_rank=8, layers=(1, 2)),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL, layers=(11, 15, 22))}


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if setup.plan_only:
        return plan(ctx, "CX-13 (layer dependence, exploratory)")
    ctx.data["exploratory"] = "CX-13 has no pre-registered threshold: per-layer numbers only, no verdict"
    out: dict[str, Estimate] = {}
    per_layer: dict[str, Any] = {}
    for L in setup.layers:
        b = make_bench(dataclasses.replace(setup, layer=L), ctx)
        if not b.usable:
            ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
            return {}
        a = b.weak()
        prompts = b.test["tool"][:setup.n_select]
        clean = score(b.generate(a, prompts), prompts)["strict_format"]
        cc = b.crosscoder("DFC", "weak")
        table = ranked_latents(b, a, cc, cc.blocks()["a_excl"], setup.n_rank)
        sel = pick(table, (1, 4), force=setup.ignore_gates)
        cells, per = run_grid(b, a, cc, L, sel, prompts, clean, label=f"DFC@{L}", ctx=ctx)
        per_layer[str(L)] = {"clean_strict_format": float(clean.mean()), "cells": cells,
                             "n_tool_leaning": int((table.mean_pos > table.mean_neg).sum()),
                             "top_cohen_d": float(table.cohen_d[0]) if len(table.index) else float("nan")}
        if cells:
            i = int(np.argmax([c["gain"] for c in cells]))
            per_layer[str(L)]["best_cell"] = cells[i]
            out[f"cx13_best_gain_layer{L}"] = paired(per[i], clean)
    ctx.data["per_layer"] = per_layer
    gains = [v for k, v in out.items() if k.startswith("cx13_best_gain_layer")]
    if gains:
        out["cx13_best_gain_max"] = max(gains, key=lambda e: e.value)
    return unjudged(out, ["cx13_best_gain_max"], EXPLORATORY, ctx.data)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    pl = data.get("per_layer")
    if not pl:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3))
    layers = sorted(pl, key=int)
    ax.plot([int(L) for L in layers], [pl[L].get("best_cell", {}).get("gain", np.nan) for L in layers], "o-",
            color="#4477aa")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("block L")
    ax.set_ylabel("best cell Δ strict format")
    ax.set_title("CX-13 (exploratory): best steering cell per layer")
    return [save(fig, out_dir / "cx13_layers.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_layers",
    title="Layer dependence of the best steering cell (CX-13, exploratory)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (weak checkpoint), blocks 11/15/22 of 30; DFC only; chat "
                "harness; exploratory; tiny_tool_pair (blocks 1–3 of 4) if the sibling fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
