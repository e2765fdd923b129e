"""E179-S1/S1b/S2/T4/NC-6 on the int8 engine: the single-user measurement (``single_user``) with the target's
dense products on int8 weights (``EngineConfig(weights="int8")``, ``lm/engine/quant.py``).

Why a second experiment: on float32 a verify step of 8 tokens costs ~2× a plain step on this CPU, so with τ ≈ 1.6
speculation cannot pay (S1 not supported on float32); the int8 kernel's cost is nearly flat in the row count
(``benchmarks/engine_weights.py``). Losslessness is judged against the same int8 engine's plain decoding, and the
shipped drafter (trained on float32 taps) reads the int8 engine's taps unchanged. The float32 rows stay in
``e179.speed_single_user``; NC-7 (engine vs transformers on the same weights) does not apply to int8 weights.
Quick runs the fixed:4 arm only (the int8 SPS table would take ~2 min to profile): T4 is judged, speedups are
reported unjudged; full runs dspark-async, fixed:4, fixed:7 and the random drafter on 10 prompts × 64 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agentmill.experiments.e179_dspark import PAPER
from agentmill.experiments.e179_dspark import single_user as base
from agentmill.experiments.e179_dspark.drafters import setup_reads
from agentmill.experiments.protocol import Experiment, RunContext, unjudged, withhold


@dataclass(frozen=True)
class Setup(base.Setup):
    weights: str = "int8"
    """Weight format of the target's dense products."""


SETUPS = {
    "smoke": Setup(prompts=1, max_new=8, reps=1, temperatures="0", arms="fixed:4", hf_prompts=0, n_boot=100,
                   drafter="random", model="tiny"),
    "quick": Setup(prompts=3, max_new=40, reps=1, temperatures="0", arms="fixed:4", hf_prompts=0, n_boot=2000,
                   sps_quick=True),
    # full: the claimed arms on 10 prompts × 64 tokens, one repetition, the quick SPS grid (the float32 experiment's
    # 30 × 128 × 3 repetitions × 7 arms has never fitted a session on 2 cores; its rows are quick-profile too).
    "full": Setup(prompts=10, max_new=64, reps=1, arms="dspark-async,fixed:4,fixed:7,random:fixed:7", hf_prompts=0,
                  n_boot=10_000, sps_quick=True, later_arms="dspark-async"),
}
QUICK_UNJUDGED = ("s1_speedup_t0", "s2_draft_share")
CLAIMS = tuple(replace(c, id=f"{c.id}-int8", statement=f"{c.statement} [int8 target weights]")
               for c in base.CLAIMS if c.id != "E179-NC7")


def measure(s: Setup, ctx: RunContext) -> dict:
    out = base.measure(s, ctx)
    if "dspark-async" not in s.arms.split(","):
        out = unjudged(out, [m for m in QUICK_UNJUDGED if m in out],
                       "quick runs the fixed:4 arm only (no int8 SPS table); S1/S2 are judged at full on dspark-async",
                       ctx.data)
        withhold(ctx.data, [m for m in ("s1_speedup_t1", "nc6_tau", "nc6_speedup") if m not in out],
                 "quick runs T = 0 and the fixed:4 arm only: S1b and NC-6 are judged at full")
    ctx.data["weights"] = s.weights
    return out


EXPERIMENT = Experiment(
    quick_budget_s=40,
    id="e179.speed_int8",
    title="DSpark single-user speedup on the int8 engine (S1, S1b, S2, T4, NC-6 with int8 target weights)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="SmolLM2-135M with int8 dense weights (7-bit weights, 8-bit activation rows on AVX2 hosts, SmoothQuant "
               "α = 0.5) on 1 CPU thread; the drafter was trained on float32 taps; quick: 3 prompts × 40 tokens, "
               "fixed:4 only.",
    requires=frozenset({"hf"}),
    plots=base.plots,
    reads=setup_reads,
)
