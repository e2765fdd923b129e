"""E175 CX-9: "spillover" to the frozen base is a leak through the joint code [P] spillover, [D] leak.

The base B is routed through the crosscoder at the last prompt token (``route(view=B)``, replace mode, as E175's
spillover patch) with three encodings of the other view: ``joint`` (the weak sibling's activation on the same
tokens, E175's choice), ``self_only(mean)`` and ``shuffled`` (the sibling's activation on another prompt). Metric:
Δ lax_tool = B-recon − B-clean per encoding. Rule: if Δ_joint's CI is above 0, then Δ_self_only ≤ ⅓·Δ_joint and B's
strict format ≤ 2 %; if Δ_joint's CI includes 0 there is nothing to explain (inconclusive). Crosscoders: CC and DFC.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import SMOKE, PairSetup, paired, plan, score
from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE, SMOL, make_bench
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup(PairSetup):
    n_harnesses: int = 1
    """Harnesses run, primary first (SmolLM2: raw, then chat). 1: the chat report is not run (≈ 23 min more on
    2 cores; method README, deviation 21)."""


SETUPS = {"smoke": Setup(**SMOKE),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

ARCHS = ("CC", "DFC")
CLAIMS = tuple(c for arch in ARCHS for c in (
    Claim(f"CX-9-{arch}-leak", f"With the {arch} crosscoder, base spillover vanishes without A's view: Δ_self_only − "
          f"⅓·Δ_joint ≤ 0 (whole CI).",
          f"[P] spillover, [D] leak; substrate: {CLAIM_SUBSTRATE}, weak checkpoint, {arch}",
          "B 0 % → 6.7 % (+6.7 ± 4.8 pp)", f"cx9_selfonly_minus_third_joint_{arch.lower()}", "<=", 0.0),
    Claim(f"CX-9-{arch}-format", f"With the {arch} crosscoder the routed base still almost never writes a strict "
          f"tool call (≤ 2 %).", f"[P] B format accuracy 0 in every run; substrate: {CLAIM_SUBSTRATE}, {arch}",
          "0 in every run", f"cx9_b_strict_format_joint_{arch.lower()}", "<=", 0.02)))


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.crosscoder.interventions import Joint, SelfOnly, Shuffled, route

    if setup.plan_only:
        return plan(ctx, "CX-9 (spillover controls)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    a, base = b.weak(), b.pair.base
    prompts = b.test["tool"]
    out: dict[str, Estimate] = {}
    tables: dict[str, Any] = {}
    for h_i, harness in enumerate(b.harnesses[:setup.n_harnesses]):  # the first is judged (raw on SmolLM2)
        tag = "" if h_i == 0 else f"{harness}_"
        rows = b.last_rows(a, prompts, harness=harness)
        clean = score(b.generate(base, prompts, harness=harness), prompts)
        table: dict[str, Any] = {"clean_lax_tool": float(clean["lax_tool"].mean())}
        for arch in ARCHS:
            cc = b.crosscoder(arch, "weak")
            encs = {"joint": Joint({(i, int(rows["pos"][i])): rows["x"][i, 0] for i in range(len(prompts))}),
                    "self_only": SelfOnly("mean", b.means(cc)),
                    "shuffled": Shuffled(rows["x"][:, 0], seed=setup.seed)}
            res = {}
            for name, enc in encs.items():
                res[name] = score(b.generate(base, prompts, lambda P, e=enc: route(
                    base, cc, layer=b.s.layer, view=1, positions="last_prompt", encode_from=e, prompt_len=P),
                    harness=harness), prompts)
                ctx.progress(f"spillover ({harness})", len(table), 1 + 3 * len(ARCHS))
            lo = f"{tag}{arch.lower()}"
            d_joint = paired(res["joint"]["lax_tool"], clean["lax_tool"])
            out[f"cx9_delta_joint_{lo}"] = d_joint
            out[f"cx9_delta_self_only_{lo}"] = paired(res["self_only"]["lax_tool"], clean["lax_tool"])
            out[f"cx9_delta_shuffled_{lo}"] = paired(res["shuffled"]["lax_tool"], clean["lax_tool"])
            n = len(prompts)
            out[f"cx9_b_strict_format_joint_{lo}"] = clopper_pearson(int(res["joint"]["strict_format"].sum()), n)
            diff = (res["self_only"]["lax_tool"] - clean["lax_tool"]) - (res["joint"]["lax_tool"]
                                                                          - clean["lax_tool"]) / 3
            metric = f"cx9_selfonly_minus_third_joint_{lo}"
            if d_joint.lo > 0:
                out[metric] = paired(diff, np.zeros_like(diff))
            elif h_i == 0:
                withhold(ctx.data, [metric], f"{PRECONDITION_NOT_MET}: Δ_joint's CI [{d_joint.lo:.3f}, "
                         f"{d_joint.hi:.3f}] includes 0 ({arch}): no spillover to explain")
                withhold(ctx.data, [f"cx9_b_strict_format_joint_{lo}"],
                         f"{PRECONDITION_NOT_MET}: no spillover ({arch})")
                out[f"cx9_b_strict_format_joint_{lo}_observed"] = out.pop(f"cx9_b_strict_format_joint_{lo}")
            table[arch] = {k: float(v["lax_tool"].mean()) for k, v in res.items()}
        tables[harness] = table
    ctx.data["primary_harness"] = b.harnesses[0]
    ctx.data["table"] = tables[b.harnesses[0]]
    ctx.data["tables"] = tables
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "table" not in data:
        return []
    plt = pyplot()
    t = data["table"]
    fig, ax = plt.subplots(figsize=(5, 3))
    names = ["joint", "self_only", "shuffled"]
    for i, arch in enumerate(a for a in ARCHS if a in t):
        ax.bar(np.arange(3) + 0.4 * i, [t[arch][n] - t["clean_lax_tool"] for n in names], width=0.4, label=arch)
    ax.set_xticks(np.arange(3) + 0.2, names)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("Δ lax tool (B routed − clean)")
    ax.set_title("CX-9: base spillover by encoding")
    ax.legend(fontsize=7)
    return [save(fig, out_dir / "cx9_spillover.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_spillover_leak",
    title="Spillover to the base is a leak through the joint code (CX-9)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M base vs Qwen2.5-3B base, crosscoders on (weak sibling, base) at block 15; raw "
                "harness (chat not run); tiny_tool_pair if the sibling fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
