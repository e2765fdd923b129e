"""E172 CT-7: Cliff-DPO reaches full-DPO accuracy at a fraction of the training compute [P], while detection
dominates the total [S].

Substrate: the tiny chained-addition model (trained from scratch here; its gate numbers go beside every row). Arms,
from the same base: Cliff-DPO = one-token pairs (``cliff_1N``, UC+SO cliffs, EOS masked) from ``failing_traces``
scanned failing traces; full DPO = trajectory pairs from ``train_problems`` × 4 samples. Same β, optimiser, epochs,
batch and evaluation (greedy accuracy on held-out problems). Every token of compute is counted per arm: detection
(sampling + rollouts, generated and prefilled tokens) and training (policy tokens × 3 for forward + backward,
reference forward tokens), loss-bearing positions, optimizer steps and wall time.

Claims (thresholds as pre-registered): gain ratio ≥ 0.5 *or* |gain difference| ≤ 2 pp (two rows; either suffices);
loss-bearing positions ratio ≤ 0.15; training wall ratio ≤ 0.5; (detection + training) total ratio ≥ 5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.e172_cliff_tokens.dpo_data import (CT7_ID, SETUPS, DPOSetup, arm_runs, gain_rows,
                                                              paired_estimate, pipeline, summary)
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, unjudged

QUICK_CHECK = ("quick runs the pipeline only (6 failing traces at n = 16, 40 training problems, one DPO seed): the "
               "claims need 100 scanned failing traces at n = 64 and 3 DPO seeds, judged at full")

CLAIMS = (
    Claim("E172-CT7-gain-ratio", "On the tiny chained-addition model, Cliff-DPO (UC+SO cliff pairs, one token, EOS "
          "masked) gains at least half of full DPO's greedy-accuracy gain (either this row or the next suffices).",
          "[P] Cliff-DPO vs DPO, Qwen3-0.6B", "Cliff-DPO up to +6.6 pts; parity with full DPO",
          "ct7_gain_ratio", ">=", 0.5, ci_bound=0.0),
    Claim("E172-CT7-gain-diff", "On the tiny chained-addition model, Cliff-DPO's greedy-accuracy gain is within ±2 pp "
          "of full DPO's (90 % CI inside the margin: TOST; either this row or the previous suffices).",
          "[P]", "parity with full DPO", "ct7_gain_diff", "in", -0.02, upper=0.02),
    Claim("E172-CT7-positions", "Cliff-DPO's loss-bearing positions are at most 0.15 of full DPO's (tiny model, "
          "~30-token traces; the paper's ratio ≈ 0.006).", "[S] ~33k vs ~5.8M positions (review only)",
          "33k / 5.8M ≈ 0.006", "ct7_position_ratio", "<=", 0.15, judge_on="exact",
          exact_why="a ratio of counted loss-bearing positions, fixed by the two pair sets and the epochs"),
    Claim("E172-CT7-train-wall", "Cliff-DPO's training wall time is at most half of full DPO's (tiny model; whole "
          "95 % CI over DPO seeds below 0.5).", "[S] 112 → 8 min (review only)", "8 / 112 ≈ 0.07",
          "ct7_train_wall_ratio", "<=", 0.5),
    Claim("E172-CT7-total-compute", "Counting detection, Cliff-DPO costs at least 5× full DPO's total compute "
          "(forward-token equivalents: generated + prefilled + 3 × trained + reference tokens; tiny model).",
          "[S] ~4,000 GPU-hours of detection (review only)", "—", "ct7_total_compute_ratio", ">=", 5.0,
          judge_on="exact", exact_why="a ratio of counted tokens (the ledgers), not a sample"),
)


def measure(s: DPOSetup, ctx: RunContext) -> dict[str, Estimate]:
    blob = pipeline(s, ctx, ctx.work_dir)
    nb = 500 if ctx.profile != "full" else 10_000  # quick and smoke are never judged: a cheap interval
    gc, gf = gain_rows(blob, "UC+SO"), gain_rows(blob, "full")
    out: dict[str, Estimate] = {}
    ledgers = {arm: [r["ledger"] for r in arm_runs(blob, arm)] for arm in ("UC+SO", "full")}
    if gc is not None and gf is not None:
        out["ct7_gain_ratio"] = paired_estimate(gc, gf, "ratio", n_boot=nb)
        out["ct7_gain_diff"] = paired_estimate(gc, gf, "diff", level=0.90, n_boot=nb)
        out["ct7_gain_cliff"] = paired_estimate(gc, None, "mean", n_boot=nb)
        out["ct7_gain_full"] = paired_estimate(gf, None, "mean", n_boot=nb)
        lc, lf = ledgers["UC+SO"][0], ledgers["full"][0]
        out["ct7_position_ratio"] = Estimate.exact(lc["train_loss_positions"] / lf["train_loss_positions"])
        out["ct7_train_token_ratio"] = Estimate.exact(lc["train_forward_tokens"] / lf["train_forward_tokens"])
        out["ct7_total_compute_ratio"] = Estimate.exact(lc["total_forward_equiv"] / lf["total_forward_equiv"])
        det = lc["detection_generated"] + lc["detection_forward"]
        out["ct7_detection_share"] = Estimate.exact(det / lc["total_forward_equiv"])
        walls = [a["wall"]["train"] / b["wall"]["train"] for a, b in zip(ledgers["UC+SO"], ledgers["full"])]
        out["ct7_train_wall_ratio"] = (repeats_estimate(walls, log=True) if len(walls) > 1
                                       else Estimate(walls[0], walls[0], walls[0], n=1, method="t_log_repeats"))
    ctx.data.update(summary(blob))
    g = blob["gate"]
    if not g["passed"] and ctx.profile == "full":
        out = unjudged(out, [c.metric for c in CLAIMS], f"{PRECONDITION_NOT_MET}: {blob['gate_text']}", ctx.data)
    elif gc is None or gf is None:
        ctx.data["precondition"] = (f"{PRECONDITION_NOT_MET}: an arm had too few pairs to train "
                                    f"(Cliff-DPO {blob['pairs']['UC+SO']}, full {blob['full_data']['pairs']})")
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    colors = {"UC+SO": "tab:orange", "UC": "tab:red", "SO": "tab:purple", "DF": "tab:gray", "full": "tab:blue"}
    for arm, led in data.get("ledgers", {}).items():
        gains = data["gains"].get(arm) or []
        if not gains:
            continue
        det = led["detection_generated"] + led["detection_forward"]
        train = led["total_forward_equiv"] - det
        for g in gains:
            ax.plot([train], [100 * g], "o", color=colors[arm], alpha=0.6)
            ax.plot([led["total_forward_equiv"]], [100 * g], "s", mfc="none", color=colors[arm], alpha=0.8)
        ax.plot([], [], "o", color=colors[arm], label=f"{'Cliff-DPO ' if arm != 'full' else ''}{arm} "
                f"({'trajectory' if arm == 'full' else 'one-token'} pairs)")
    ax.plot([], [], "ko", label="training only")
    ax.plot([], [], "ks", mfc="none", label="detection + training")
    ax.set_xscale("log")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("compute (forward-token equivalents)")
    ax.set_ylabel("greedy-accuracy gain (pp)")
    ax.set_title("CT-7: accuracy gain vs compute, tiny chained addition", fontsize=9)
    ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    p = out / "ct7_gain_vs_compute.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id=CT7_ID,
    title="E172 CT-7: Cliff-DPO vs full DPO, accuracy and a full compute ledger (tiny chained-addition model)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="a 0.14M-parameter byte-level transformer trained here to be the planted chained-addition policy "
               "(gate numbers in the record) vs Qwen3-0.6B + LoRA on GSM8K; ~25-token traces; full fine-tuning "
               "DPO, β 0.1, lr 1e-4, 3 epochs, batch 16; 3 DPO seeds over one detection set; designed error "
               "mechanisms, so a verdict checks the method's accounting and dynamics, not real models.",
    parallel_safe=True,
    quick_budget_s=12,
    version="3",
    quick_check=QUICK_CHECK,
)
