"""E179-La/Lb/Lc/Le: the load-aware scheduler under closed-loop load, engine-direct.

Virtual users keep C requests in flight on one ``SpecEngine`` (a finished request is replaced at once) for a warm-up
plus a measurement window; each repetition runs every arm at every concurrency once, arms in ABBA order. Throughput
is committed output tokens per second; per-user TPS is the paper's mean over finished requests of (n − 1)/(t_last −
t_first).

Every claim below is computed within each repetition (the arms of one repetition ran side by side, so machine noise
hits them alike) and judged on the Student-t interval over the repetitions (``core.stats.repeats_estimate``; the
geometric mean for ratios): one timing window is never a verdict (issue 24).

La   dspark-async throughput ≥ 0.95 × the best fixed:k at every C (no per-C tuning); secondary ≥ 0.97 × AR;
Lc   at matched throughput, per-user TPS dspark-async / fixed:1 (MTP-1-like), geometric mean over the overlap of
     the two Pareto frontiers ≥ 1.3 (paper +57–85%);
Lb   where fixed:7 falls below AR, dspark-async stays ≥ 0.97 × AR;
Le   at low load (C ∈ {1, 2}) dspark-async ≥ 0.95 × fixed:7.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e179_dspark import PAPER
from agentmill.experiments.e179_dspark.drafters import setup_reads
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    arms: str = "off,fixed:1,fixed:2,fixed:4,fixed:7,dspark-async"
    concurrency: str = "1,2,4,8,16"
    window_s: float = 40.0
    warmup_s: float = 5.0
    reps: int = 2
    max_new: int = 128
    temperature: float = 1.0
    prompts: int = 40
    threads: int = 1
    drafter: str = "shipped"
    model: str = "smollm2"
    sps_quick: bool = False


SETUPS = {
    "smoke": Setup(arms="off,fixed:1,fixed:4", concurrency="1,2", window_s=0.5, warmup_s=0.1, reps=2, max_new=8,
                   prompts=4, drafter="random", model="tiny"),
    # quick (issue 24): 3 repetitions of 2.5 s windows instead of one of 8 s, so each claim has an interval at the
    # same cost; 32-token requests so that even at C = 4 requests finish inside a window (per-user TPS, Lc)
    "quick": Setup(arms="off,fixed:1,fixed:7,dspark-async", concurrency="1,4", window_s=2.5, warmup_s=0.75, reps=3,
                   max_new=32, prompts=8, sps_quick=True),
    "full": Setup(),
}

CLAIMS = (
    Claim("E179-La", "The load-aware scheduler tracks the best fixed verify length at every load: min over C of "
          "throughput(dspark-async) / max_k throughput(fixed:k).", "[P] DSpark §5; engine reports",
          "matches or beats the best fixed k", "la_vs_best_fixed", ">=", 0.95),
    Claim("E179-La2", "Secondary: the scheduler never falls below plain decoding: min over C of throughput "
          "dspark-async / AR.", "[P] DSpark §5", "—", "la_vs_ar", ">=", 0.97),
    Claim("E179-Lc", "At matched throughput DSpark gives each user more speed than an MTP-1-like drafter: per-user "
          "TPS dspark-async / fixed:1, geometric mean over the frontier overlap.", "[P] DSpark abstract",
          "+57–85%", "lc_matched_ratio", ">=", 1.3),
    Claim("E179-Lb", "Where fixed:7 falls below AR, the scheduler does not: min over those C of dspark-async / AR "
          "(inconclusive when fixed:7 never falls below AR).", "[P] DSpark §5.2", "—", "lb_collapse_guard", ">=",
          0.97),
    Claim("E179-L2", "The trace simulator predicts the real engine: largest |simulated / real throughput − 1| over "
          "the arms and concurrencies of the sweep.", "[R] simulator check", "—", "l2_sim_max_dev", "<=", 0.15),
    Claim("E179-Le", "Adaptive verification costs little at low load: min over C ∈ {1, 2} of dspark-async / "
          "fixed:7 throughput.", "[E] vLLM #52362: −4.7 to −8.3%", "−4.7 to −8.3%", "le_low_load", ">=", 0.95),
)


def _engine_for(arm: str, engine: Any, drafter: Any, sps: Any, max_seqs: int) -> Any:
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import DSparkProposer

    if arm == "off":
        return SpecEngine(engine, max_num_seqs=max_seqs)
    return SpecEngine(engine, DSparkProposer(drafter), policy=arm, sps=sps, max_num_seqs=max_seqs)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e179_dspark.drafters import load_drafter
    from agentmill.experiments.e179_dspark.sps_cache import sps_table
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.bench import closed_loop, matched_throughput_ratios
    from agentmill.methods.dspark.data import builtin_prompts, chat_ids
    from agentmill.methods.dspark.pipeline import tapped_engine

    layers = (0, 1) if s.model == "tiny" else (1, 10, 19, 28)
    engine = tapped_engine(layers, threads=s.threads, model=s.model)
    drafter = load_drafter(s.drafter, engine, s.model, ctx)
    arms = s.arms.split(",")
    cs = [int(c) for c in s.concurrency.split(",")]
    needs = any(a.startswith(("dspark", "dsd")) for a in arms)
    sps = sps_table(engine, ctx, quick=s.sps_quick, max_r=max(cs)) if needs else None
    prompts = [chat_ids(engine.tokenizer, it.text) for split in ("test", "calib")
               for it in builtin_prompts(split, max(1, s.prompts // 2), seed=5)]
    params = SamplingParams(temperature=s.temperature, max_tokens=s.max_new, seed=None, ignore_eos=True)
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.work_dir / (f"points-{s.arms}-{s.concurrency}-{s.window_s:g}-{s.warmup_s:g}-{s.reps}-{s.max_new}"
                           ".jsonl").replace(":", "_")
    done = {}
    if path.exists():
        for ln in path.read_text().splitlines():
            try:
                row = json.loads(ln)
            except json.JSONDecodeError:
                continue
            done[(row["policy"], row["concurrency"], row["rep"])] = row
    order = []
    for rep in range(s.reps):
        for c in cs:
            seq = arms if (rep + cs.index(c)) % 2 == 0 else arms[::-1]      # ABBA
            order += [(a, c, rep) for a in seq]
    with path.open("a") as fh:
        for i, (a, c, rep) in enumerate(order):
            ctx.progress("La closed loop (arm × C × rep)", i, len(order))
            if (a, c, rep) in done:
                continue
            spec = _engine_for(a, engine, drafter, sps, max(c, 1))
            pt = closed_loop(spec, prompts, params, concurrency=c, duration_s=s.window_s, warmup_s=s.warmup_s,
                             policy=a)
            row = {**pt.as_dict(), "rep": rep}
            done[(a, c, rep)] = row
            fh.write(json.dumps(row) + "\n")
            fh.flush()
    # per repetition: the claims are computed inside each one (its arms ran side by side) and judged over them
    per_rep = [{a: {c: {k: float(done[(a, c, r)][k]) for k in ("throughput", "per_user_tps", "tau")} for c in cs}
                for a in arms} for r in range(s.reps)]
    agg = {a: {c: {k: float(np.nanmean([p[a][c][k] for p in per_rep])) for k in ("throughput", "per_user_tps",
                                                                                 "tau")} for c in cs} for a in arms}
    ctx.data["points"] = {a: {str(c): v for c, v in d.items()} for a, d in agg.items()}
    ctx.data["points_per_rep"] = [{a: {str(c): v for c, v in d.items()} for a, d in p.items()} for p in per_rep]
    if "off" in arms and 1 in cs:
        # Ld (report): the highest throughput each policy reaches while every user keeps ≥ 50% / 80% of the
        # single-user plain-decoding speed
        base = agg["off"][1]["per_user_tps"]
        ctx.data["sla"] = {f"{int(f * 100)}%": {a: max([v["throughput"] for v in agg[a].values()
                                                         if v["per_user_tps"] >= f * base] or [0.0]) for a in arms}
                           for f in (0.5, 0.8)}
    vals: dict[str, list[float]] = {}
    main = "dspark-async" if "dspark-async" in arms else arms[-1]
    fixed = [a for a in arms if a.startswith("fixed:")]
    fall = [c for c in cs if "fixed:7" in arms and "off" in arms
            and agg["fixed:7"][c]["throughput"] < agg["off"][c]["throughput"]]
    for p in per_rep:
        def thr(a: str, c: int, p: dict = p) -> float:
            return p[a][c]["throughput"]

        if fixed:
            vals.setdefault("la_vs_best_fixed", []).append(min(thr(main, c) / max(thr(f, c) for f in fixed)
                                                               for c in cs))
        if "off" in arms:
            vals.setdefault("la_vs_ar", []).append(min(thr(main, c) / thr("off", c) for c in cs))
            if "fixed:7" in arms:  # over the C where fixed:7 fell below AR on the mean of the repetitions
                vals.setdefault("lb_collapse_guard", []).append(
                    min(thr(main, c) / thr("off", c) for c in fall) if fall else float("nan"))
        if "fixed:7" in arms:
            low = [c for c in cs if c <= 2]
            vals.setdefault("le_low_load", []).append(
                min(thr(main, c) / thr("fixed:7", c) for c in low) if low else float("nan"))
        if "fixed:1" in arms:
            m = matched_throughput_ratios(_load_points(main, p[main]), _load_points("fixed:1", p["fixed:1"]))
            ctx.data.setdefault("matched_per_rep", []).append(m)
            vals.setdefault("lc_matched_ratio", []).append(m["geomean"])
    if "fixed:7" in arms and "off" in arms:
        ctx.data["fixed7_below_ar_at"] = fall
    vals["l2_sim_max_dev"] = _simulator_check(s, ctx, engine, drafter, prompts, params, sps, arms, cs, per_rep)
    ctx.data["per_rep"] = vals
    return {k: _over_reps(v, log=k != "l2_sim_max_dev") for k, v in vals.items()}


def _load_points(arm: str, by_c: dict[int, dict[str, float]]) -> list[Any]:
    from agentmill.methods.dspark.bench import LoadPoint

    return [LoadPoint(arm, c, v["throughput"], v["per_user_tps"], 0, 0, 0, v["tau"], 0, 0, 0, 0)
            for c, v in by_c.items()]


def _over_reps(values: list[float], *, log: bool) -> Estimate:
    """The claim's statistic over the repetitions: mean (geometric for ratios) with its t-interval; undefined (NaN,
    which the judge calls inconclusive) when any repetition's value is (no C where fixed:7 fell below AR, frontiers
    that do not overlap)."""
    if not values or not all(np.isfinite(values)):
        nan = float("nan")
        return Estimate(nan, nan, nan, n=len(values), method="t_log_repeats" if log else "t_repeats")
    return repeats_estimate(values, log=log)


def _simulator_check(s: Setup, ctx: RunContext, engine: Any, drafter: Any, prompts: list[list[int]], params: Any,
                     sps: Any, arms: list[str], cs: list[int], per_rep: list[dict]) -> list[float]:
    """L2: record full-verification traces on the same prompts, replay every (arm, C) of the sweep in the simulator
    and compare throughputs; then extend the sweep to C = 64 in the simulator (reported, not gated). Returns the
    largest |simulated / real − 1| of each repetition (the simulator's side is one deterministic replay)."""
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.policies import make_policy
    from agentmill.methods.dspark.proposers import DSparkProposer
    from agentmill.methods.dspark.simulate import TraceSet, simulate

    if sps is None:
        from agentmill.experiments.e179_dspark.sps_cache import sps_table

        sps = sps_table(engine, ctx, quick=s.sps_quick, max_r=max(cs))
    g = drafter.cfg.block_size
    spec = SpecEngine(engine, DSparkProposer(drafter), verify_len=g, max_num_seqs=4, record_rounds=True)
    for p in prompts[: max(4, len(prompts) // 2)]:
        spec.add_request(p, params)
    ctx.progress("L2 trace recording (full verification)", 0, None)
    while spec.has_work():
        spec.step()
    st = spec.stats
    traces = TraceSet.from_rounds(spec.rounds, None, st.draft_seconds / max(1, st.rounds),
                                  [len(p) for p in prompts])
    sim: dict[str, dict[str, float]] = {}
    for a in arms:
        sim[a] = {}
        for c in cs + [64]:
            pt = simulate(traces, make_policy(a, sps), sps, concurrency=c, max_tokens=s.max_new,
                          n_requests=4 * c + 8, seed=c)
            sim[a][str(c)] = pt.throughput
    ctx.data["simulated_throughput"] = sim
    ctx.data["trace"] = {"rounds": int(len(traces.accepted)), "tau_full": float(1 + traces.accepted.mean()),
                         "draft_s_per_request": traces.draft_s_per_request}
    return [max(abs(sim[a][str(c)] / p[a][c]["throughput"] - 1) for a in arms for c in cs) for p in per_rep]


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()

    pts = data.get("points")
    if not pts:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    for a, d in pts.items():
        cs = sorted(d, key=int)
        x = [d[c]["throughput"] for c in cs]
        y = [d[c]["per_user_tps"] for c in cs]
        ax.plot(x, y, marker="o", label=a)
        for c, xi, yi in zip(cs, x, y):
            ax.annotate(f"C={c}", (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel("throughput (output tok/s)")
    ax.set_ylabel("per-user TPS")
    ax.set_title("E179: per-user speed vs throughput frontier")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out_dir / "e179_frontier.png"
    save(fig, p, dpi=120)
    return [p]


EXPERIMENT = Experiment(
    quick_budget_s=100,
    id="e179.load_vs_fixed",
    title="DSpark scheduler under closed-loop load: frontier vs fixed verify lengths (La, Lb, Lc, Le)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="SmolLM2-135M fp32, 1 thread, engine-direct virtual users vs GPU servers at batch 128; CPU verify "
               "cost is steep in B so over-verification starts at C ≈ 4; quick: C ∈ {1, 4}, 3 repetitions of 2.5 s "
               "windows after 0.75 s warm-up, 32-token requests, 8 prompts.",
    requires=frozenset({"hf"}),
    plots=plots,
    reads=setup_reads,
)
