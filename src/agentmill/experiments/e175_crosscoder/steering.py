"""E175 CX-6 (one A-exclusive latent steers the sibling, +65 pp [P]) and CX-8 (a mean-difference vector steers as
well as the "single feature" [I]).

Weak checkpoint of the tiny tool sibling; DFC crosscoder on (weak, base). Ranking: Cohen's d of A-exclusive
latents on joint codes at the last prompt token, 400 train tool vs 400 train generic prompts (E175's rule: top
max(1, ⌈k%·n⌉) of those with μ_tool > μ_gen; here |S| ∈ {1, 4}). Grid: |S| ∈ {1, 4} × α ∈ {2, 8, 32} × positions
{last_prompt, all}, delta-mode ``steer`` encoded self_only(mean), 100 selection prompts per cell, metric Δ
strict_format vs clean. The best cell's CI is taken at the Holm family level (level 1 − 0.05/12, which is Holm's
first step), the McNemar p-values of all cells are Holm-adjusted and recorded, and the best cell is re-tested once on
fresh prompts. CX-8: h += c·(μ̄_tool − μ̄_gen) of raw block-L activations, c ∈ {2, 4, 8}, the same two position
specs; metric = best mean-diff cell − best DFC cell on the same prompts (paired).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, holm, mcnemar_exact
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import SMOKE, PairSetup, paired, plan, score
from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE, SMOL, make_bench
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    n_select: int = 100
    """Selection prompts per cell."""
    n_rank: int = 400
    """Train prompts per side for the ranking."""


SETUPS = {"smoke": Setup(**SMOKE, n_select=6, n_rank=8),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

SUB = f"substrate: {CLAIM_SUBSTRATE}, weak checkpoint, DFC"
CLAIMS = (
    Claim("CX-6-select", "The best steering cell (|S| ≤ 4 A-exclusive latents) lifts strict format by ≥ 20 pp "
          "(Holm-level CI > 0).", f"[P] E175 single-feature steering; {SUB}",
          "+65 pp (22.5 % → 87.5 %, best of 48 cells, n = 40)", "cx6_best_cell_gain", ">=", 0.20, ci_bound=0.0),
    Claim("CX-6-fresh", "The chosen cell still lifts strict format by ≥ 10 pp on fresh prompts (CI > 0).",
          f"[P] E175; re-test on a fresh split; {SUB}", "—", "cx6_fresh_gain", ">=", 0.10, ci_bound=0.0),
    Claim("CX-8", "A mean-difference vector steers as well as the best single-feature cell: best mean-diff gain − "
          "best DFC gain ≥ −5 pp (lower CI ≥ −10 pp).", f"[I] baseline; {SUB}", "—", "cx8_meandiff_minus_dfc",
          ">=", -0.05, ci_bound=-0.10),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.crosscoder.diagnostics import encode_rows
    from agentmill.methods.crosscoder.features import rank_features
    from agentmill.methods.crosscoder.interventions import SelfOnly, add_direction, steer
    from agentmill.methods.crosscoder.organism import make_prompts

    if setup.plan_only:
        return plan(ctx, "CX-6 / CX-8 (steering)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    a = b.weak()
    cc = b.crosscoder("DFC", "weak")
    L = setup.layer
    tool_tr = make_prompts("tool", setup.n_rank, seed=setup.seed)
    gen_tr = make_prompts("generic", setup.n_rank, seed=setup.seed)
    rt, rg = b.last_rows(a, tool_tr), b.last_rows(a, gen_tr)
    sc = np.asarray(cc.scales, np.float32)[None, :, None]
    ft, _ = encode_rows(cc, rt["x"] * sc)
    fg, _ = encode_rows(cc, rg["x"] * sc)
    table = rank_features(ft, fg, cc.blocks()["a_excl"])
    sel = {1: table.top(0)[:1], 4: [int(i) for i in table.index[table.mean_pos > table.mean_neg][:4]]}
    if setup.ignore_gates and not sel[1]:  # smoke: an untrained crosscoder has no tool-leaning latent; run the grid
        sel = {1: [int(table.index[0])], 4: [int(i) for i in table.index[:4]]}
    ctx.data["ranking"] = {"index": table.index[:10].tolist(), "cohen_d": table.cohen_d[:10].tolist(),
                           "auroc": table.auroc[:10].tolist(), "fire_tool": table.fire_pos[:10].tolist(),
                           "fire_generic": table.fire_neg[:10].tolist()}
    prompts = b.test["tool"][:setup.n_select]
    clean = score(b.generate(a, prompts), prompts)["strict_format"]
    enc = SelfOnly("mean", b.means(cc))
    cells: list[dict[str, Any]] = []
    per: list[np.ndarray] = []
    for n_s, feats in sel.items():
        for alpha in (2.0, 8.0, 32.0):
            for pos in ("last_prompt", "all"):
                if not feats:
                    continue
                got = score(b.generate(a, prompts, lambda P, f=feats, al=alpha, po=pos: steer(
                    a, cc, layer=L, view=0, features=f, alpha=al, positions=po, encode_from=enc, prompt_len=P)),
                    prompts)["strict_format"]
                per.append(got)
                cells.append({"size": n_s, "alpha": alpha, "positions": pos, "features": feats,
                              "gain": float(got.mean() - clean.mean()),
                              "p": mcnemar_exact(got.astype(bool), clean.astype(bool)).p_value})
                ctx.progress("steering cells", len(cells), 12)
    adj = holm([c["p"] for c in cells]) if cells else []
    for c, p in zip(cells, adj):
        c["p_holm"] = p
    ctx.data["cells"] = cells
    ctx.data["clean_strict_format"] = float(clean.mean())
    out: dict[str, Estimate] = {}
    if not cells:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: no A-exclusive latent leans towards tool prompts"
        return out
    best = int(np.argmax([c["gain"] for c in cells]))
    family = max(1, len(cells))
    out["cx6_best_cell_gain"] = paired(per[best], clean, level=1 - 0.05 / family)
    bc = cells[best]
    ctx.data["best_cell"] = bc
    fresh = make_prompts("tool", setup.n_fresh, split="test", seed=setup.seed + 3)
    f_clean = score(b.generate(a, fresh), fresh)["strict_format"]
    f_st = score(b.generate(a, fresh, lambda P: steer(a, cc, layer=L, view=0, features=bc["features"],
                                                      alpha=bc["alpha"], positions=bc["positions"],
                                                      encode_from=enc, prompt_len=P)), fresh)["strict_format"]
    out["cx6_fresh_gain"] = paired(f_st, f_clean)
    ctx.data["shrinkage_selection_minus_fresh"] = bc["gain"] - float(f_st.mean() - f_clean.mean())
    # CX-8: mean-difference vector of raw block-L activations (tool − generic, last prompt token)
    direction = rt["x"][:, 0].mean(0) - rg["x"][:, 0].mean(0)
    md_cells, md_per = [], []
    for coef in (2.0, 4.0, 8.0):
        for pos in ("last_prompt", "all"):
            got = score(b.generate(a, prompts, lambda P, c=coef, po=pos: add_direction(
                a, layer=L, direction=direction, coef=c, positions=po, prompt_len=P)), prompts)["strict_format"]
            md_per.append(got)
            md_cells.append({"coef": coef, "positions": pos, "gain": float(got.mean() - clean.mean())})
    ctx.data["meandiff_cells"] = md_cells
    ctx.data["meandiff_norm"] = float(np.linalg.norm(direction))
    mbest = int(np.argmax([c["gain"] for c in md_cells]))
    out["cx8_meandiff_minus_dfc"] = paired(md_per[mbest], per[best])
    out["cx6_clean_strict_format"] = Estimate.exact(float(clean.mean()), n=len(clean))
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "cells" not in data:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for (size, pos), color in zip([(1, "last_prompt"), (1, "all"), (4, "last_prompt"), (4, "all")],
                                  ("#4477aa", "#66ccee", "#cc6677", "#ee99aa")):
        cs = [c for c in data["cells"] if c["size"] == size and c["positions"] == pos]
        if cs:
            ax.plot([c["alpha"] for c in cs], [c["gain"] for c in cs], "o-", color=color, label=f"|S|={size}, {pos}")
    md = data.get("meandiff_cells", [])
    for pos, ls in (("last_prompt", "--"), ("all", ":")):
        cs = [c for c in md if c["positions"] == pos]
        if cs:
            ax.plot([c["coef"] for c in cs], [c["gain"] for c in cs], ls, color="k", label=f"mean-diff (coef), {pos}")
    ax.set_xscale("log", base=2)
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("α (features) / coef (mean-diff)")
    ax.set_ylabel("Δ strict format vs clean")
    ax.set_title("CX-6/CX-8: steering dose-response (tiny pair)")
    ax.legend(fontsize=6)
    return [save(fig, out_dir / "cx6_steering_dose_response.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_steering",
    title="One A-exclusive latent steers the sibling; mean-difference baseline (CX-6, CX-8)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (weak checkpoint), block 15, 1,024 latents vs "
                "ToolRL-Qwen2.5-3B; 12-cell grid vs 48; 100 prompts per cell; chat harness; tiny_tool_pair if "
                "the sibling fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
