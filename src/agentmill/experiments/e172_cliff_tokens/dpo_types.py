"""E172 CT-8: only some cliff types are worth training on [P].

The CT-7 data (same setup, read from CT-7's work dir or computed here): one-token Cliff-DPO arms trained on the pairs
of UC+SO, UC only, SO only and DF only cliffs, from the same gated tiny chained-addition model. Greedy-accuracy gain
on held-out problems per arm; for the SO arm, the sampled (T = 1) error rate at SO sites before and after.

Claims (thresholds as pre-registered): UC+SO gain ≥ +10 pp (CI > 0); DF-only gain within ±3 pp (90 % CI: TOST; with
fewer than 10 DF pairs the arm reports "no DF cliffs to train on", as derived: a DF token's true drop is ≤ 0.01);
SO-only training lowers the sampled SO-site error rate by ≥ 30 % relative (CI > 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.e172_cliff_tokens.dpo_data import (CT7_ID, SETUPS, DPOSetup, arm_runs, gain_rows,
                                                              paired_estimate, pipeline, summary)
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, unjudged, withhold

QUICK_CHECK = ("quick runs the pipeline only (CT-7's quick data: 6 failing traces at n = 16, one DPO seed): judged at "
               "full (100 scanned failing traces at n = 64, 3 DPO seeds)")

CLAIMS = (
    Claim("E172-CT8-ucso", "On the tiny chained-addition model, one-token DPO on UC+SO cliff pairs raises greedy "
          "accuracy by at least 10 pp (CI > 0).", "[P] UC and SO pairs help", "up to +6.6 pts (Qwen3-0.6B)",
          "ct8_gain_ucso", ">=", 0.10, ci_bound=0.0),
    Claim("E172-CT8-df", "On the tiny chained-addition model, DF-only cliff pairs change greedy accuracy by less "
          "than ±3 pp (90 % CI inside: TOST).", "[P] DF pairs do not help; [D] DF cliffs are noise",
          "no gain from DF pairs", "ct8_gain_df", "in", -0.03, upper=0.03),
    Claim("E172-CT8-so-rate", "On the tiny chained-addition model, SO-only cliff pairs lower the sampled (T = 1) "
          "SO-site error rate by at least 30 % relative (CI > 0).", "[P] SO pairs help", "—",
          "ct8_so_error_reduction", ">=", 0.30, ci_bound=0.0),
)


def so_reduction(blob: dict[str, Any], n_boot: int) -> Estimate | None:
    """1 − (SO-site error rate after SO-only training, pooled over DPO seeds) / (rate before), with a cluster
    bootstrap over held-out problems (the same sampling seed before and after)."""
    runs = [r for r in arm_runs(blob, "SO") if "so" in r]
    if not runs:
        return None
    before = np.asarray(blob["heldout"]["base_so"], float)          # [problems, (sites, errors)]
    after = np.sum([np.asarray(r["so"], float) for r in runs], 0)   # pooled over seeds
    k = len(runs)

    def f(rows: np.ndarray) -> float:
        b, a = before[rows].sum(0), after[rows].sum(0)
        if b[0] == 0 or a[0] == 0 or b[1] == 0:
            return float("nan")
        return 1.0 - (a[1] / a[0]) / (b[1] / b[0])
    del k
    return cluster_bootstrap(f, np.arange(len(before)), n_boot=n_boot, seed=173)


def measure(s: DPOSetup, ctx: RunContext) -> dict[str, Estimate]:
    blob = pipeline(s, ctx, ctx.shared_work_dir(CT7_ID))
    nb = 500 if ctx.profile != "full" else 10_000  # quick and smoke are never judged: a cheap interval
    out: dict[str, Estimate] = {}
    for arm, name in (("UC+SO", "ucso"), ("UC", "uc"), ("SO", "so"), ("DF", "df")):
        g = gain_rows(blob, arm)
        if g is not None:
            out[f"ct8_gain_{name}"] = paired_estimate(g, None, "mean", level=0.90 if arm == "DF" else 0.95,
                                                      n_boot=nb)
    red = so_reduction(blob, nb)
    if red is not None:
        out["ct8_so_error_reduction"] = red
        b = np.asarray(blob["heldout"]["base_so"]).sum(0)
        out["ct8_so_error_before"] = Estimate.exact(b[1] / max(b[0], 1), n=int(b[0]))
    for arm in ("UC+SO", "UC", "SO", "DF"):
        out[f"ct8_pairs_{arm.replace('+', '').lower()}"] = Estimate.exact(blob["pairs"][arm])
    ctx.data.update(summary(blob))
    if blob["pairs"]["DF"] < 10 and "ct8_gain_df" not in out:
        withhold(ctx.data, ["ct8_gain_df"], f"no DF cliffs to train on ({blob['pairs']['DF']} DF pairs < 10), "
                 "consistent with [D]: a DF token's true drop is at most 0.01")
    g = blob["gate"]
    if not g["passed"] and ctx.profile == "full":
        out = unjudged(out, [c.metric for c in CLAIMS], f"{PRECONDITION_NOT_MET}: {blob['gate_text']}", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    arms = ["UC+SO", "UC", "SO", "DF", "full"]
    for i, arm in enumerate(arms):
        gains = [100 * g for g in data.get("gains", {}).get(arm, [])]
        if gains:
            ax.bar(i, float(np.mean(gains)), color="tab:blue" if arm == "full" else "tab:orange", alpha=0.7)
            ax.plot([i] * len(gains), gains, "k.", ms=4)
        else:
            ax.text(i, 0.5, "not trained\n(too few pairs)", ha="center", fontsize=6)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels([f"{a}\n{data.get('pairs', {}).get(a, '')} pairs" if a != "full" else
                        f"full DPO\n{data.get('full_data', {}).get('pairs', '')} pairs" for a in arms], fontsize=7)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("greedy-accuracy gain (pp)")
    ax.set_title("CT-8: gain by cliff type (dots: DPO seeds), tiny chained addition", fontsize=9)
    fig.tight_layout()
    p = out / "ct8_gain_by_type.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e172.cliff_dpo_types",
    title="E172 CT-8: which cliff types are worth training on (tiny chained-addition model, CT-7's data)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="the CT-7 data: a 0.14M-parameter byte-level transformer trained here to be the planted "
               "chained-addition policy (gate numbers in the record) vs Qwen3-0.6B + LoRA; types from the model's "
               "own full-vocabulary entropy at T = 1; 3 DPO seeds over one detection set; designed error mechanisms.",
    parallel_safe=True,
    quick_budget_s=3,
    version="3",
    quick_check=QUICK_CHECK,
)
