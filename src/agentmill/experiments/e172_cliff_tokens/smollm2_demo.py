"""E172 CT-10 (demonstration, no verdict): cliffs on a real language model.

SmolLM2-135M-Instruct (the run's ``--model``) answers 2-shot 2- and 3-term addition (``envs.arithmetic`` levels 2 and
3, the raw few-shot completion prompt with worked solutions) at T = 0.7. Problems are screened with 16 samples each;
a problem whose 16-sample pass rate lies in [0.2, 0.8] gives its first failing sample that completed an ``Answer:``
line within 40 tokens. On each such trace: PTS-style bisection (threshold 0.2, n = 32) proposes drops, the cliff
test confirms them with fresh n = 64 estimates at t−1 and t; confirmed cliffs are typed (full-vocabulary entropy of
the T = 0.7 policy, and the paper's top-20 partial entropy of the raw distribution) and replicated with fresh
estimates (``n_fresh``); the first ``exhaustive`` traces are also scanned at every position (``exhaustive_n``) to
compare bisection with exhaustive rollouts. Continuations stop at the completed answer line or at 40 tokens of
trace + continuation (absolute). Sizes are scaled to the paper's full budget on this machine (method README,
deviation 17); a wall budget (counted after the model load) stops starting new stages once spent (what was skipped
is recorded).

Quick does not load the model ("full only"); smoke runs the same pipeline on a random-initialised tiny model with a
parity verifier (a stand-in that exercises the code, nothing about real models).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    substrate: str = "model"
    """``model``: the run's ``--model`` (hf:smollm2); ``tiny``: a random-initialised TinyLM with a parity verifier
    (smoke only)."""
    load: bool = True
    """False: plan only, nothing loaded or measured (quick: CT-10 is full only)."""
    levels: tuple[int, ...] = (2, 3)
    """Arithmetic levels screened in turn (2: two 2-digit terms, 3: three)."""
    temperature: float = 0.7
    screen_n: int = 16
    """Samples per screened problem (the pass-rate estimate)."""
    band: tuple[float, float] = (0.2, 0.8)
    """Pass-rate band a problem must fall in."""
    max_screen: int = 30
    """Problems screened at most."""
    traces: int = 3
    """Failing traces studied (one per in-band problem)."""
    max_total_len: int = 40
    """Absolute cap on trace + continuation tokens (and the longest failing trace kept)."""
    bisect_threshold: float = 0.2
    bisect_n: int = 32
    confirm_n: int = 64
    n_fresh: int = 128
    """Fresh continuations per side when replicating a confirmed cliff."""
    exhaustive: int = 1
    """Traces also scanned at every position (the first ones)."""
    exhaustive_n: int = 32
    wall_budget_s: float = 600.0
    """No new trace, replication or exhaustive scan is started after this many seconds of measurement (the model
    load excluded; recorded)."""
    seed: int = 0


SETUPS = {"smoke": Setup(substrate="tiny", screen_n=8, band=(0.0, 1.0), max_screen=2, traces=1, max_total_len=12,
                         bisect_n=8, confirm_n=8, n_fresh=8, exhaustive=1, exhaustive_n=8, wall_budget_s=30.0),
          "quick": Setup(load=False),
          "full": Setup()}

REPORTED = ("demonstration, no pre-registered threshold: reported only (0.32 is the paper's share of failing "
            "Qwen3-8B traces with a cliff, shown for reference)")
CLAIMS = (
    Claim("E172-CT10", "Share of failing SmolLM2 addition traces (problems with a 16-sample pass rate in [0.2, 0.8]) "
          "that hold at least one cliff found by bisection and confirmed at n = 64 (demonstration; reported only).",
          "[P] the paper reports cliffs in 32.0 % of failing Qwen3-8B traces (exhaustive scans); here a reported "
          "demonstration", "0.32 (Qwen3-8B, failing)", "ct10_cliff_trace_share", ">=", 0.32),
)


def _tiny_lm(s: Setup) -> Any:
    from agentmill.lm.tiny import TinyConfig, TinyLM

    return TinyLM(TinyConfig(layers=2, d=64, heads=4, max_len=48, seed=s.seed))


def _problem(lm: Any, s: Setup, i: int) -> tuple[dict[str, Any], list[int], Any, Any]:
    """(description, prompt ids, verifier, stop) of screened problem ``i``."""
    if s.substrate == "tiny":
        prompt = [256] + list(f"Q:{10 + i}+{20 + i}=\n".encode())

        def parity(ids: list[int]) -> bool:
            return bool(ids) and int(ids[-1]) % 2 == 0

        return {"problem": f"tiny stand-in {i}", "level": 0}, prompt, parity, None
    from agentmill.envs.arithmetic import STOP_REGEX, example_pair, make_task

    level = s.levels[i % len(s.levels)]
    task = make_task(level, 172 + s.seed, i)
    prompt = lm.render(task.completion_prompt(example_pair(level, 172 + s.seed, i)))
    stop_re = re.compile(STOP_REGEX)

    def verifier(ids: list[int]) -> bool:
        return task.verify(lm.decode(ids)).value == 1.0

    def stop(ids: list[int]) -> bool:
        return "\n" in lm.decode(ids[-1:]) and bool(stop_re.search(lm.decode(ids)))

    return {"problem": task.question, "answer": task.answer, "level": level}, prompt, verifier, stop


def _cliff_row(c: Any, lm: Any, trace: list[int]) -> dict[str, Any]:
    return {"pos": c.pos, "token": lm.decode([trace[c.pos - 1]]), "k_prev": c.k_prev, "n_prev": c.n_prev,
            "k_curr": c.k_curr, "n_curr": c.n_curr, "drop": c.drop, "z": c.z}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if not s.load:
        ctx.data["plan_only"] = ("CT-10 is full only: SmolLM2 screening, bisection, replication and an exhaustive "
                                 "scan take ≈ 10 min; quick loads no model")
        return {}
    from agentmill.lm.fork import WhiteBoxForker
    from agentmill.methods.cliff_tokens.bisect import bisect_drops
    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator
    from agentmill.methods.cliff_tokens.replication import replicate
    from agentmill.methods.cliff_tokens.taxonomy import classify
    from agentmill.methods.cliff_tokens.ztest import CliffTest, detect, expected_false_cliffs

    t_load = time.perf_counter()
    if s.substrate == "tiny":
        lm = _tiny_lm(s)
    else:
        lm = ctx.load_lm()
        lm = getattr(lm, "lm", lm)
    t_start = time.perf_counter()  # the wall budget counts measurement, not the model load
    ctx.data["load_s"] = t_start - t_load
    cfg = PotentialConfig(n=s.bisect_n, temperature=s.temperature, max_total_len=s.max_total_len,
                          early_stop_zeros=20, seed=s.seed)
    test = CliffTest()
    fork = WhiteBoxForker(lm)

    def elapsed() -> float:
        return time.perf_counter() - t_start

    # ------------------------------------------------------------------ screening
    screened: list[dict[str, Any]] = []
    picked: list[tuple[dict[str, Any], list[int], Any, Any, list[int]]] = []
    for i in range(s.max_screen):
        if len(picked) >= s.traces or elapsed() > s.wall_budget_s:
            break
        desc, prompt, verifier, stop = _problem(lm, s, i)
        est = PotentialEstimator(fork, verifier, cfg, stop=stop)
        samples = est.sample(prompt, s.screen_n, (s.seed, 7, i))
        graded = [g for _, g, _ in samples if g is not None]
        rate = float(np.mean(graded)) if graded else float("nan")
        row = {**desc, "pass_rate": rate, "correct": int(sum(graded)), "n": len(graded),
               "finish": {f: sum(1 for *_, x in samples if x == f) for f in ("stop", "eos", "length")}}
        screened.append(row)
        ctx.progress("screen", len(screened), s.max_screen)
        if not (s.band[0] <= rate <= s.band[1]):
            continue
        # a failing trace completed its answer: the answer line ended (stop) or the model ended its turn (EOS)
        failing = [tk for tk, g, f in samples if g is False and (f != "length" or s.substrate == "tiny")
                   and 2 <= len(tk) <= s.max_total_len and (s.substrate == "tiny" or "Answer:" in lm.decode(tk))]
        row["in_band"] = True
        if failing:
            picked.append((row, prompt, verifier, stop, failing[0]))
    ctx.data["screened"] = screened
    ctx.data["screen_s"] = elapsed()

    # ------------------------------------------------------------------ per trace
    # bisection + confirmation + types, replication of the confirmed cliffs, and (first ``exhaustive`` traces) an
    # exhaustive scan; each stage starts only inside the wall budget (what was skipped is recorded).
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for j, (desc, prompt, verifier, stop, trace) in enumerate(picked):
        if elapsed() > s.wall_budget_s:
            skipped.append(f"traces {j}..{len(picked) - 1}")
            break
        t0 = time.perf_counter()
        est = PotentialEstimator(fork, verifier, cfg, stop=stop)
        evaluated: dict[int, tuple[int, int]] = {}
        cands: list[int] = []
        cliffs, cost = bisect_drops(est, prompt, trace, threshold=s.bisect_threshold, n=s.bisect_n,
                                    confirm_n=s.confirm_n, test=test, seed_key=(j,), evaluated=evaluated,
                                    candidates=cands)
        row: dict[str, Any] = {**desc, "trace_text": lm.decode(trace), "tokens": [lm.decode([x]) for x in trace],
                               "T": len(trace), "candidates": cands, "bisect_cost": cost,
                               "bisect_points": {str(t): list(v) for t, v in sorted(evaluated.items())},
                               "cliffs": [_cliff_row(c, lm, trace) for c in cliffs]}
        pos = [c.pos for c in cliffs]
        full_t = classify(lm, prompt, trace, pos, entropy="full", dist="policy", temperature=s.temperature)
        top20 = classify(lm, prompt, trace, pos, entropy="top20", dist="raw")
        for r, a, b in zip(row["cliffs"], full_t, top20):
            r.update({"type": a.kind, "rank": a.rank, "entropy": a.entropy, "prob": a.prob, "type_top20": b.kind,
                      "entropy_top20": b.entropy})
        row["bisect_wall_s"] = time.perf_counter() - t0
        rows.append(row)
        if cliffs and elapsed() > s.wall_budget_s:
            skipped.append(f"replication of trace {j}")
        elif cliffs:
            t0 = time.perf_counter()
            reps = replicate(est, prompt, trace, cliffs, n_fresh=s.n_fresh, test=test, seed_key=(j,))
            for r, rep in zip(row["cliffs"], reps):
                r.update({"replicated": rep.replicated, "fresh": [rep.k_prev, rep.n_prev, rep.k_curr, rep.n_curr]})
            row["replication_wall_s"] = time.perf_counter() - t0
        if j < s.exhaustive and elapsed() > s.wall_budget_s:
            skipped.append(f"exhaustive scan of trace {j}")
        elif j < s.exhaustive:
            ex = PotentialEstimator(fork, verifier, PotentialConfig(
                n=s.exhaustive_n, temperature=s.temperature, max_total_len=s.max_total_len, early_stop_zeros=20,
                seed=s.seed), stop=stop)
            scan = ex.scan(prompt, trace, seed_key=(j, 9))
            ex_cliffs = detect(scan.k, scan.n, trace, test)
            ex_types = classify(lm, prompt, trace, [c.pos for c in ex_cliffs], entropy="full", dist="policy",
                                temperature=s.temperature)
            row["exhaustive"] = {"k": scan.k.tolist(), "n": scan.n.tolist(), "skipped": scan.skipped,
                                 "rollouts": int(scan.n[scan.n > 0].sum()),
                                 "cliffs": [{**_cliff_row(c, lm, trace), "type": ty.kind}
                                            for c, ty in zip(ex_cliffs, ex_types)],
                                 "expected_false": expected_false_cliffs(scan.k, scan.n, test),
                                 "wall_s": float(scan.cost.get("wall_seconds", 0.0))}
        ctx.progress("traces", j + 1, len(picked))
    stopped = (f"wall budget {s.wall_budget_s:.0f} s spent before: " + "; ".join(skipped)) if skipped else ""
    ctx.data.update({"traces": rows, "stopped": stopped, "substrate": ("tiny stand-in (random TinyLM 2x64, parity "
                     "verifier)" if s.substrate == "tiny" else f"{ctx.model} (SmolLM2-135M-Instruct fp32)"),
                     "wall_s": elapsed()})

    in_band = sum(1 for r in screened if r.get("in_band"))
    n_tr = len(rows)
    with_cliff = sum(1 for r in rows if r["cliffs"])
    allc = [c for r in rows for c in r["cliffs"]]
    reps = [c for c in allc if "replicated" in c]
    out: dict[str, Estimate] = {
        "ct10_problems_screened": Estimate.exact(len(screened)),
        "ct10_problems_in_band": Estimate.exact(in_band),
        "ct10_traces": Estimate.exact(n_tr),
        "ct10_confirmed_cliffs": Estimate.exact(len(allc), n=n_tr),
        "ct10_bisect_candidates": Estimate.exact(sum(len(r["candidates"]) for r in rows), n=n_tr),
        "ct10_bisect_rollouts_per_trace": Estimate.exact(
            float(np.mean([r["bisect_cost"]["rollouts"] for r in rows])) if rows else float("nan"), n=n_tr),
    }
    for kind in ("DF", "UC", "SO", "other"):
        out[f"ct10_cliffs_{kind}"] = Estimate.exact(sum(1 for c in allc if c.get("type") == kind))
    if allc:
        agree = sum(1 for c in allc if c["type"] == c["type_top20"])
        out["ct10_type_agreement_top20"] = proportion_estimate(agree, len(allc))
    if reps:
        out["ct10_replicated_share"] = proportion_estimate(sum(bool(c["replicated"]) for c in reps), len(reps))
    exh = [r for r in rows if "exhaustive" in r]
    if exh:
        found = [(c["pos"], {b["pos"] for b in r["cliffs"]}, set(r["candidates"]))
                 for r in exh for c in r["exhaustive"]["cliffs"]]
        out["ct10_exhaustive_cliffs"] = Estimate.exact(len(found), n=len(exh))
        if found:
            out["ct10_bisect_recall_of_exhaustive"] = proportion_estimate(
                sum(1 for p, conf, cand in found if p in conf or p in cand), len(found))
        out["ct10_exhaustive_rollouts_per_trace"] = Estimate.exact(
            float(np.mean([r["exhaustive"]["rollouts"] for r in exh])), n=len(exh))
        out["ct10_bisect_rollouts_exhaustive_traces"] = Estimate.exact(
            float(np.mean([r["bisect_cost"]["rollouts"] for r in exh])), n=len(exh))
    if n_tr:
        out["ct10_cliff_trace_share"] = proportion_estimate(with_cliff, n_tr)
    else:
        ctx.data["no_traces"] = (f"no problem of {len(screened)} screened had a 16-sample pass rate in "
                                 f"[{s.band[0]}, {s.band[1]}] with a failing completed trace ≤ {s.max_total_len} "
                                 "tokens")
    return unjudged(out, [c.metric for c in CLAIMS], REPORTED, ctx.data)


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    rows = data.get("traces") or []
    if not rows:
        return []
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), 1, figsize=(7.5, 2.2 * len(rows)), squeeze=False)
    for ax, r in zip(axes[:, 0], rows):
        if "exhaustive" in r:
            k, n = np.asarray(r["exhaustive"]["k"], float), np.asarray(r["exhaustive"]["n"], float)
            ok = k >= 0
            ax.plot(np.flatnonzero(ok), k[ok] / n[ok], "-", color="0.4", lw=1, label="exhaustive")
            for c in r["exhaustive"]["cliffs"]:
                ax.axvline(c["pos"], color="tab:orange", ls=":", lw=1)
        pts = sorted((int(t), v[0] / v[1]) for t, v in r["bisect_points"].items() if v[1])
        if pts:
            ax.plot(*zip(*pts), "o", ms=4, color="tab:blue", label="bisection estimates")
        for c in r["cliffs"]:
            ax.annotate("", (c["pos"], c["k_curr"] / c["n_curr"]), (c["pos"] - 1, c["k_prev"] / c["n_prev"]),
                        arrowprops={"arrowstyle": "->", "color": "tab:red"})
            ax.text(c["pos"], 1.02, f"{c['token']!r} {c.get('type', '')}", color="tab:red", fontsize=6,
                    ha="center", va="bottom")
        # V̂_t is the potential after token y_t: token y_t's label sits at x = t (x = 0: the prompt alone)
        ax.set_xticks(range(1, r["T"] + 1))
        ax.set_xticklabels([t.replace("\n", "\\n") for t in r["tokens"]], fontsize=5, rotation=90)
        ax.set_xlim(-0.5, r["T"] + 0.5)
        ax.set_ylim(-0.05, 1.12)
        ax.set_ylabel("V̂_t after token y_t", fontsize=7)
        ax.set_title(f"{r['problem']} (pass rate {r['pass_rate']:.2f}): {r['trace_text'].strip()[:70]!r}",
                     fontsize=7)
        ax.legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    return [save(fig, out / "ct10_potential_curves.png")]


EXPERIMENT = Experiment(
    id="e172.cliff_smollm2_demo",
    title="E172 CT-10: cliffs on SmolLM2 addition traces (demonstration, reported only)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="SmolLM2-135M-Instruct on 2-shot 2- and 3-term addition, T = 0.7 (temperature only), a handful of "
               "failing traces ≤ 40 tokens, bisection n = 32 / confirmation n = 64, replication at n = 128 (not 512), "
               "an exhaustive scan at n = 32 on 1 trace vs seven instruction-tuned LLMs on GSM1K/MATH500/AIME with 64 "
               "rollouts at every position; a demonstration, no verdict.",
    uses_model=True,
    requires=frozenset({"hf"}),
    parallel_safe=False,
    quick_budget_s=1,
)
