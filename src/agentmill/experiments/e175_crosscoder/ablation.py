"""E175 CX-10: the top exclusive latent is load-bearing [I] (E175 infers it from the λ_excl result).

Final tiny tool sibling; DFC on (final, base); the top-1 A-exclusive latent by Cohen's d (joint codes at the last
prompt token, 400 train tool vs 400 generic prompts) is ablated (α = 0, delta mode, self_only(mean) encoding) at
all positions; control: the A-exclusive latent whose firing rate on tool prompts is closest to the top latent's.
Metric: Δ strict_format vs clean on the test tool prompts. Thresholds: top-1 ≤ −30 pp (CI < 0); random within
±5 pp (whole CI).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


from agentmill.core.stats import Estimate
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.e175_crosscoder.pairbench import (SMOKE, PairSetup, dead_block_note, paired, plan,
                                                              score, top_latents)
from agentmill.experiments.e175_crosscoder.smolbench import CLAIM_SUBSTRATE, SMOL, make_bench
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup(PairSetup):
    n_rank: int = 400


SETUPS = {"smoke": Setup(**SMOKE, n_rank=8),
          "quick": Setup(plan_only=True), "full": Setup(**SMOL)}

SUB = f"substrate: {CLAIM_SUBSTRATE}, final sibling, DFC"
CLAIMS = (
    Claim("CX-10-top", "Ablating the top A-exclusive latent at all positions drops strict format by ≥ 30 pp.",
          f"[I]; {SUB}", "— (E175 infers it from λ_excl)", "cx10_delta_top", "<=", -0.30, ci_bound=0.0),
    Claim("CX-10-random", "Ablating a firing-matched random A-exclusive latent changes strict format by < 5 pp.",
          f"[I] control; {SUB}", "—", "cx10_delta_random", "in", -0.05, upper=0.05),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.crosscoder.interventions import SelfOnly, ablate

    if setup.plan_only:
        return plan(ctx, "CX-10 (ablation)")
    b = make_bench(setup, ctx)
    if not b.usable:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {b.name} failed its gates ({b.gates.text()})"
        return {}
    a = b.pair.sibling
    cc, table, fire = top_latents(b, "final", setup.n_rank)
    note = dead_block_note(ctx.data)
    if note and not setup.ignore_gates:  # smoke (ignore_gates) runs on regardless: never judged
        ctx.data["precondition"] = note
        return {}
    top = int(table.index[0])
    others = [int(i) for i in table.index[1:]]
    rnd = min(others, key=lambda i: (abs(fire[i] - fire[top]), i)) if others else top
    ctx.data["top"] = {"latent": top, "cohen_d": float(table.cohen_d[0]), "auroc": float(table.auroc[0]),
                       "fire_tool": float(fire[top])}
    ctx.data["random"] = {"latent": rnd, "fire_tool": float(fire[rnd])}
    prompts = b.test["tool"]
    enc = SelfOnly("mean", b.means(cc))
    clean = score(b.generate(a, prompts), prompts)["strict_format"]
    res = {}
    for name, lat in (("top", top), ("random", rnd)):
        res[name] = score(b.generate(a, prompts, lambda P, f=lat: ablate(
            a, cc, layer=setup.layer, view=0, features=[f], positions="all", encode_from=enc, prompt_len=P)),
            prompts)["strict_format"]
    ctx.data["rates"] = {"clean": float(clean.mean()), **{k: float(v.mean()) for k, v in res.items()}}
    return {"cx10_delta_top": paired(res["top"], clean), "cx10_delta_random": paired(res["random"], clean)}


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    if "rates" not in data:
        return []
    plt = pyplot()
    r = data["rates"]
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(list(r), list(r.values()), color=["#999999", "#cc6677", "#4477aa"])
    ax.set_ylabel("strict format")
    ax.set_title("CX-10: ablating one A-exclusive latent")
    return [save(fig, out_dir / "cx10_ablation.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_ablation",
    title="The top exclusive latent is load-bearing (CX-10)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note=("SmolLM2-135M vs its SFT tool sibling (final), block 15 vs ToolRL-Qwen2.5-3B; chat harness; "
                "tiny_tool_pair if the sibling fails its gates"),
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
)
