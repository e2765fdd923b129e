"""E175 CX-12: the cleanest exclusive latents are prompt-template detectors [P] caveat.

Final tiny tool sibling; DFC on (final, base); top-1 A-exclusive latent by Cohen's d (as CX-10). Its firing rate
(joint code > 0 at the last prompt token) on test prompts of each category: tool (list + tool need), decoy (list, no
need), bare (need, no list), generic. Thresholds (Clopper–Pearson CI wholly on the right side): tool ≥ 0.9, generic
≤ 0.05, decoy ≥ 0.8 and bare ≤ 0.2 (a template detector, not an intent detector). In the tiny pair the sibling was
trained to call tools only on tool prompts, so the planted truth is "intent = list ∧ need"; the claim asks what the
latent reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import SMOKE, PairSetup, dead_block_note, plan, top_latents
from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE, SMOL, make_bench
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    n_rank: int = 400


SETUPS = {"smoke": Setup(**SMOKE, n_rank=8),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

SUB = f"substrate: {CLAIM_SUBSTRATE}, final sibling, DFC top-1 A-exclusive latent"
CLAIMS = (
    Claim("CX-12-tool", "The top latent fires on ≥ 90 % of tool prompts.", f"[P] fires on 99.9 % of tool prompts; "
          f"{SUB}", "99.9 %", "cx12_fire_tool", ">=", 0.9),
    Claim("CX-12-generic", "It fires on ≤ 5 % of generic prompts.", f"[P] 0 % of FineWeb; {SUB}", "0 %",
          "cx12_fire_generic", "<=", 0.05),
    Claim("CX-12-decoy", "It fires on ≥ 80 % of decoy prompts (tool list, no tool need): a template detector.",
          f"[P] caveat (template detectors); {SUB}", "—", "cx12_fire_decoy", ">=", 0.8),
    Claim("CX-12-bare", "It fires on ≤ 20 % of bare prompts (tool need, no list).", f"[P] caveat; {SUB}", "—",
          "cx12_fire_bare", "<=", 0.2),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.crosscoder.diagnostics import encode_rows

    if setup.plan_only:
        return plan(ctx, "CX-12 (template detector)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    cc, table, _ = top_latents(b, "final", setup.n_rank)
    note = dead_block_note(ctx.data)
    if note and not setup.ignore_gates:  # smoke (ignore_gates) runs on regardless: never judged
        ctx.data["precondition"] = note
        return {}
    top = int(table.index[0])
    sc = np.asarray(cc.scales, np.float32)[None, :, None]
    out: dict[str, Estimate] = {}
    rates = {}
    for cat, prompts in b.test.items():
        rows = b.last_rows(b.pair.sibling, prompts)
        f, _ = encode_rows(cc, rows["x"] * sc)
        k = int((f[:, top] > 0).sum())
        out[f"cx12_fire_{cat}"] = clopper_pearson(k, len(prompts))
        rates[cat] = k / len(prompts)
    ctx.data.update({"top": {"latent": top, "cohen_d": float(table.cohen_d[0]), "auroc": float(table.auroc[0])},
                     "rates": rates})
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "rates" not in data:
        return []
    plt = pyplot()
    r = data["rates"]
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(list(r), list(r.values()), color="#4477aa")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("firing rate at last prompt token")
    ax.set_title(f"CX-12: top A-excl latent #{data['top']['latent']}")
    return [save(fig, out_dir / "cx12_template_detector.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_template_detector",
    title="The cleanest exclusive latents are template detectors (CX-12)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (final), block 15 vs ToolRL-Qwen2.5-3B; synthetic "
                "decoy/bare categories; tiny_tool_pair if the sibling fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
