"""E175 CX-2: crosscoders recover planted model-specific features, and Latent Scaling catches a feature that B
carries in shrunken form [P: arXiv 2504.02922, 2602.11729].

``make_toy_pair``: d = 64, 64 shared features (B's direction rotated ≤ 10°), 8 A-only, 8 B-only, one feature in A
at full size and in B at 0.2×, p_active 0.05, Exp(1) magnitudes. Per seed a plain BatchTopK crosscoder (CC) and a
DFC (BatchTopK + Partition(0.05, 0.05)) are trained (D = 256, k = 8).

- Recovery: a planted A-only feature u is recovered by CC when some latent has cos(d^A, u) ≥ 0.9 and ρ ≥ 0.9, by
  DFC when such a latent lies in the A-exclusive block. Metric: the minimum over seeds and both crosscoders of the
  recovered share (threshold 7/8).
- Shared: of the shared features recovered (best cos ≥ 0.9 on A's side; CC), the share whose latent has
  ρ ∈ [0.3, 0.7]; minimum over seeds (threshold 0.9).
- Latent Scaling: for CC's latent best matching the shrunken feature, ν_r = β_r^B / β_r^A; share of seeds with
  ν_r ≥ 0.1 (threshold 4/5; judged only with 5 seeds). The L1 crosscoder is reported on seed 0 (full).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup:
    seeds: int = 1
    rows: int = 50_000
    eval_rows: int = 10_000
    dict_size: int = 256
    k: int = 8
    steps: int = 1000
    l1_variant: bool = False
    """Also train the L1 crosscoder on seed 0 (reported, not judged)."""


SETUPS = {"smoke": Setup(rows=4000, eval_rows=1000, steps=30),
          "quick": Setup(),
          "full": Setup(seeds=5, rows=100_000, eval_rows=20_000, steps=1000, l1_variant=True)}  # README deviation 3

EXACT_WHY = "a count over fixed seeds of deterministic training runs on seeded data; no sampling step is left"
CLAIMS = (
    Claim("CX-2-recover", "Crosscoders recover planted A-only features: ≥ 7/8 by the plain crosscoder (ρ ≥ 0.9) and "
          "by the DFC (in its A-exclusive block), worst seed.", "[P] arXiv 2504.02922, 2602.11729; substrate: "
          "make_toy_pair", "—", "cx2_a_only_recovered_min", ">=", 7 / 8, judge_on="exact", exact_why=EXACT_WHY),
    Claim("CX-2-shared", "Recovered shared features get balanced decoders: ρ ∈ [0.3, 0.7] for ≥ 90 % (worst seed).",
          "[P] Anthropic crosscoders (relative norms); substrate: make_toy_pair", "—", "cx2_shared_rho_ok_min",
          ">=", 0.9, judge_on="exact", exact_why=EXACT_WHY),
    Claim("CX-2-scaling", "Latent Scaling flags the feature B carries at 0.2×: ν_r ≥ 0.1 in ≥ 4/5 seeds.",
          "[P] arXiv 2504.02922 §3 (Latent Scaling); substrate: make_toy_pair", "—", "cx2_nu_r_flag_share", ">=",
          0.8, judge_on="exact", exact_why=EXACT_WHY),
)


def _unit_rows(w: np.ndarray) -> np.ndarray:
    return w / np.maximum(np.linalg.norm(w, axis=1, keepdims=True), 1e-12)


def analyse(cc: Any, toy: Any, x_eval: np.ndarray) -> dict[str, Any]:
    """Recovery, shared-ρ and Latent Scaling numbers of one trained crosscoder on the toy pair."""
    from agentmill.methods.crosscoder import latent_scaling, relative_norms
    from agentmill.methods.crosscoder.diagnostics import encode_rows, fvu

    w = cc.dec_weight().detach().numpy()
    rho, _ = relative_norms(cc)
    wa = _unit_rows(w[:, 0])
    a_excl = cc.blocks()["a_excl"]
    cos_a = toy.a_only @ wa.T  # (8, D)
    if a_excl.stop > a_excl.start:
        ok = (cos_a[:, a_excl] >= 0.9).any(1)
    else:
        ok = ((cos_a >= 0.9) & (rho[None] >= 0.9)).any(1)
    cos_s = toy.shared_a @ wa.T
    best = cos_s.argmax(1)
    matched = cos_s.max(1) >= 0.9
    rho_ok = (rho[best] >= 0.3) & (rho[best] <= 0.7)
    j = int((toy.shrink_a @ wa.T).argmax())
    f, x_hat = encode_rows(cc, x_eval)
    ls = latent_scaling(cc, x_eval, j, f=f, x_hat=x_hat)
    fa, fb = fvu(x_eval, x_hat)
    return {"a_only_recovered": float(ok.mean()), "shared_matched": float(matched.mean()),
            "shared_rho_ok": float(rho_ok[matched].mean()) if matched.any() else float("nan"),
            "shrink_latent": j, "shrink_cos": float((toy.shrink_a @ wa.T).max()), "shrink_rho": float(rho[j]),
            "nu_r": ls["nu_r"], "nu_eps": ls["nu_eps"], "fvu_a": fa, "fvu_b": fb,
            "l0": float((f > 0).sum(1).mean()), "rho": [float(r) for r in rho],
            "blocks": {k: [v.start, v.stop] for k, v in cc.blocks().items()}}


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.crosscoder import CrossCoderConfig, Partition, train_crosscoder
    from agentmill.methods.crosscoder.synthetic import make_toy_pair

    runs: list[dict[str, Any]] = []
    for seed in range(setup.seeds):
        toy = make_toy_pair(n=setup.rows + setup.eval_rows, seed=seed)
        arms = [("CC", None, "batchtopk"), ("DFC", Partition(0.05, 0.05), "batchtopk")]
        if setup.l1_variant and seed == 0:
            arms.append(("L1", None, "l1"))
        for name, part, sp in arms:
            cfg = CrossCoderConfig(dict_size=setup.dict_size, k=setup.k, steps=setup.steps, partition=part,
                                   sparsity=sp, warmup=min(100, setup.steps // 10), dead_window=20_000, seed=seed)
            cc, log = train_crosscoder(toy.x[:setup.rows], cfg)
            x_eval = toy.x[setup.rows:] * np.asarray(cc.scales, np.float32)[None, :, None]
            out = analyse(cc, toy, x_eval)
            out.update(arm=name, seed=seed, seconds=log.seconds, threshold=log.threshold)
            runs.append(out)
            ctx.progress("crosscoders", len(runs), None)
    ctx.data["runs"] = runs
    ctx.data["substrate"] = "make_toy_pair (d = 64, 64 shared, 8 A-only, 8 B-only, one 0.2×-in-B feature)"
    judged = [r for r in runs if r["arm"] in ("CC", "DFC")]
    cc_runs = [r for r in runs if r["arm"] == "CC"]
    n = len(judged)
    out = {"cx2_a_only_recovered_min": Estimate.exact(min(r["a_only_recovered"] for r in judged), n=n),
           "cx2_shared_rho_ok_min": Estimate.exact(min(r["shared_rho_ok"] for r in cc_runs), n=len(cc_runs)),
           "cx2_nu_r_flag_share": Estimate.exact(float(np.mean([r["nu_r"] >= 0.1 for r in cc_runs])),
                                                 n=len(cc_runs)),
           "cx2_dfc_shared_rho_ok_min": Estimate.exact(min(r["shared_rho_ok"] for r in judged if r["arm"] == "DFC"),
                                                       n=len(cc_runs))}
    if setup.seeds < 5:
        withhold(ctx.data, ["cx2_nu_r_flag_share"], f"{setup.seeds} seed(s): the rule needs 5 (full)")
        out["cx2_nu_r_flag_share_observed"] = out.pop("cx2_nu_r_flag_share")
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    runs = [r for r in data["runs"] if r["seed"] == 0]
    fig, axes = plt.subplots(1, len(runs), figsize=(3.4 * len(runs), 2.8), squeeze=False)
    for ax, r in zip(axes[0], runs):
        rho = np.asarray(r["rho"], float)
        blocks = {k: slice(*v) for k, v in r["blocks"].items() if v[1] > v[0]}
        for (name, sl), color in zip(blocks.items(), ("#cc6677", "#4477aa", "#999933")):
            vals = rho[sl]
            ax.hist(vals[np.isfinite(vals)], bins=20, range=(0, 1), alpha=0.7, color=color, label=name)
        ax.set_title(f"{r['arm']} (seed 0)")
        ax.set_xlabel("ρ = ‖d^A‖ / (‖d^A‖ + ‖d^B‖)")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("latents")
    fig.tight_layout()
    return [save(fig, out_dir / "cx2_relative_norms.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_toy_recovery",
    title="Planted model-specific features are recovered; Latent Scaling flags shrinkage (CX-2)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="synthetic toy pair (d = 64, 256 latents, k = 8) with known ground truth; quick: 1 seed, 50k rows, "
               "1,000 steps (the Latent Scaling rule needs 5 seeds: full); full: 5 seeds, 100k rows, 1,000 steps",
    plots=plots,
    parallel_safe=True,
    quick_budget_s=45,
)
