"""The single-user speed measurement of E179 (S1, S1b, S2, T4, NC-6, NC-7), shared by ``speed_single_user`` (the
float32 target) and ``speed_int8`` (int8 target weights).
E179-S1/S2/T4 + NC-6, NC-7: one user, speculation vs plain decoding in the same engine.

Every arm decodes every held-out prompt alone (batch 1, 1 thread, ``ignore_eos``), arms interleaved per prompt with
the order rotated, so machine noise hits all arms alike. The speedup of an arm on a prompt is AR time / arm time;
the claim is on the median over prompts (bootstrap CI).

S1    ``dspark-async`` at T = 0: median speedup ≥ 1.5 ([R] target; the speedup model gives 1.3–1.7× for τ ≈ 2.5–3.2);
S1b   the same at T = 1.0: ≥ 1.3;
S2    the drafter's share of round time ≤ 20% (mean over prompts of each decode's share, t-interval);
T4    greedy outputs of every speculative arm token-identical to AR: share ≥ 0.99 (mismatches logged);
NC6   a random-weight drafter: τ ≤ 1.2 (mean over prompts, t-interval) and speedup < 1 — the harness cannot
      manufacture a speedup;
NC7   the AR arm is this engine's best plain path: its tok/s ≥ 0.9 × transformers ``generate`` on the same weights
      (per prompt, the two decodes back to back in alternating order; geometric mean with a t-interval over prompts).

S2 and NC7 are timings, so each rests on one value per prompt and an interval over prompts, never one window
(issue 24).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci, repeats_estimate
from agentmill.experiments.e179_dspark.sps_cache import sps_table
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, RunContext


@dataclass(frozen=True)
class Setup:
    prompts: int = 30
    max_new: int = 128
    reps: int = 3
    temperatures: str = "0,1.0"
    arms: str = "dspark-async,fixed:7,fixed:1,dspark,threshold:0.5,ngram:4,random:fixed:7"
    threads: int = 1
    hf_prompts: int = 5
    seed: int = 0
    n_boot: int = 10_000
    drafter: str = "shipped"
    model: str = "smollm2"
    sps_quick: bool = False
    later_arms: str | None = None
    """Arms run at the temperatures after the first (``None``: all of ``arms``). The later temperatures feed only
    S1b (dspark-async against AR); NC-6 and T4 read the first, so the other arms there are reported, not judged."""


SETUPS = {
    "smoke": Setup(prompts=2, max_new=12, reps=1, arms="fixed:4,ngram:4,random:fixed:4", hf_prompts=1, n_boot=100,
                   drafter="random", model="tiny"),
    # quick: the claimed arms only (S1 dspark-async, NC-6 random:fixed:7) and fixed:7 for T4; fixed:1 and ngram:4
    # are reported at full (issue 24: the main job's budget). At T = 1 only S1b's arm: fixed:7 and the random
    # drafter there judged nothing and took 48 of the lane's 287 s (docs/LOG.md, 2026-11-29).
    "quick": Setup(prompts=3, max_new=40, reps=1, arms="dspark-async,fixed:7,random:fixed:7", hf_prompts=3,
                   n_boot=2000, sps_quick=True, later_arms="dspark-async"),
    "full": Setup(),
}

CLAIMS = (
    Claim("E179-S1", "Speculation speeds up one user over plain decoding in the same engine: median per-prompt "
          "speedup of dspark-async, fp32, T = 0.", "[P] DSpark §4 (single-user speedup)", "2–3× on GPU targets",
          "s1_speedup_t0", ">=", 1.5, ci_bound=1.0),
    Claim("E179-S1b", "The same at T = 1.0.", "[P] DSpark §4", "—", "s1_speedup_t1", ">=", 1.3, ci_bound=1.0),
    Claim("E179-S2", "The drafter is cheap: its share of round wall time (dspark-async, T = 0).",
          "[P] DSpark §5 (Markov head +0.2–1.3% of round time)", "small", "s2_draft_share", "<=", 0.20),
    Claim("E179-T4", "Speculation is lossless on the real model: share of greedy outputs token-identical to AR "
          "(every speculative arm).", "[P] DSpark App. A; Leviathan et al. 2023", "exact", "t4_identical_share",
          ">=", 0.99, judge_on="exact",
          exact_why="greedy decoding is deterministic: each output is token-identical to AR or not, and a mismatch is "
                    "a losslessness bug, not noise"),
    Claim("E179-NC6a", "Negative control: a random-weight drafter accepts almost nothing (τ).", "[R] negative control",
          "—", "nc6_tau", "<=", 1.2),
    Claim("E179-NC6b", "Negative control: a random-weight drafter does not speed up decoding (median speedup).",
          "[R] negative control", "—", "nc6_speedup", "<=", 1.0),
    Claim("E179-NC7", "The AR baseline is not handicapped: engine plain decode tok/s / transformers generate "
          "tok/s (same weights, fp32, same threads; per-prompt pairs).", "[R] negative control", "—", "nc7_ar_vs_hf",
          ">=", 0.9),
)


def _arm(name: str, engine: Any, drafter: Any, random_drafter: Any, sps: Any) -> Any:
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import DSparkProposer, NgramProposer

    if name == "off":
        return SpecEngine(engine, max_num_seqs=1)
    if name.startswith("ngram:"):
        k = int(name.split(":")[1])
        return SpecEngine(engine, NgramProposer(k=k), verify_len=k, max_num_seqs=1)
    if name.startswith("random:"):
        return SpecEngine(engine, DSparkProposer(random_drafter), policy=name.split(":", 1)[1], sps=sps,
                          max_num_seqs=1)
    return SpecEngine(engine, DSparkProposer(drafter), policy=name, sps=sps, max_num_seqs=1)


def _nc7_pairs(engine: Any, prompts: list[list[int]], max_new: int, threads: int, seed: int) -> list[list[float]]:
    """Per prompt, ``[engine plain decode tok/s, transformers generate tok/s]`` on the same weights, the two decodes
    back to back and their order alternating, so a change in machine load hits both sides of a pair alike. Each
    side is warmed up first on a short decode (lazy initialisation is not decode speed)."""
    import torch

    from agentmill.lm.engine import SamplingParams
    from agentmill.lm.hf import load
    from agentmill.methods.dspark.bench import decode_alone
    from agentmill.methods.dspark.spec_engine import SpecEngine

    lm = load("smollm2")
    torch.set_num_threads(threads)
    ar = SpecEngine(engine, max_num_seqs=1)

    def engine_tok_s(p: list[int], n: int) -> float:
        toks, secs = decode_alone(ar, p, SamplingParams(temperature=0, max_tokens=n, seed=seed, ignore_eos=True))
        return len(toks) / secs

    def hf_tok_s(p: list[int], n: int) -> float:
        ids = torch.tensor([p])
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                    do_sample=False, pad_token_id=lm.tokenizer.eos_token_id)
        return (out.shape[1] - len(p)) / (time.perf_counter() - t0)

    engine_tok_s(prompts[0], 4)
    hf_tok_s(prompts[0], 4)
    pairs = []
    for i, p in enumerate(prompts):
        if i % 2 == 0:
            e = engine_tok_s(p, max_new)
            h = hf_tok_s(p, max_new)
        else:
            h = hf_tok_s(p, max_new)
            e = engine_tok_s(p, max_new)
        pairs.append([e, h])
    return pairs


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e179_dspark.drafters import load_drafter
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.bench import paired_single_user
    from agentmill.methods.dspark.data import builtin_prompts, chat_ids
    from agentmill.methods.dspark.pipeline import tapped_engine

    layers = (0, 1) if s.model == "tiny" else (1, 10, 19, 28)
    engine = tapped_engine(layers, threads=s.threads, model=s.model, weights=getattr(s, "weights", "dense"))
    drafter = load_drafter(s.drafter, engine, s.model, ctx)
    rnd = load_drafter("random", engine, s.model) if s.model == "tiny" else _random_like(drafter, engine)
    arms = ["off"] + [a for a in s.arms.split(",") if a]
    needs_sps = any(a.split(":")[-2 if a.startswith("random:") else 0].startswith(("dspark", "dsd")) for a in arms)
    sps = sps_table(engine, ctx, quick=s.sps_quick) if needs_sps else None
    prompts = [chat_ids(engine.tokenizer, it.text) for it in builtin_prompts("test", s.prompts, seed=3)]
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {}
    temps = [float(t) for t in s.temperatures.split(",")]
    for T in temps:
        t_arms = arms if T == temps[0] or s.later_arms is None else ["off"] + s.later_arms.split(",")
        key = ",".join(t_arms[1:])
        path = ctx.work_dir / f"single-T{T:g}-{s.prompts}-{s.max_new}-{s.reps}-{key}.json".replace(":", "_")
        if path.exists() and "tau" in (cached := json.loads(path.read_text())):  # older caches lack per-decode τ
            res[f"{T:g}"] = cached
            continue
        params = SamplingParams(temperature=T, max_tokens=s.max_new, seed=s.seed, ignore_eos=True)
        factories = {a: (lambda a=a: _arm(a, engine, drafter, rnd, sps)) for a in t_arms}
        total = len(t_arms) * len(prompts) * s.reps
        done = [0]

        def tick(k: int, T: float = T) -> None:
            done[0] += k
            ctx.progress(f"S1 single user, T = {T:g} (arm × prompt)", done[0], total)

        r = paired_single_user(factories, prompts, params, reps=s.reps, progress=tick)
        path.write_text(json.dumps(r))
        res[f"{T:g}"] = r
    ctx.data["single"] = {T: {"seconds": r["seconds"], "stats": r["stats"]} for T, r in res.items()}
    out: dict[str, Estimate] = {}

    def speedup(r: dict[str, Any], arm: str) -> np.ndarray:
        ar = np.median(np.array(r["seconds"]["off"]), axis=1)
        return ar / np.median(np.array(r["seconds"][arm]), axis=1)

    def med(x: np.ndarray) -> Estimate:
        return bootstrap_ci(x, np.median, n_boot=s.n_boot, seed=s.seed)

    main = "dspark-async" if "dspark-async" in arms else [a for a in arms if a != "off"][0]
    summary = {}
    for T, r in res.items():
        summary[T] = {a: {"median_speedup": float(np.median(speedup(r, a))), "tau": r["stats"][a]["tau"],
                          "draft_share": r["stats"][a]["draft_share"]} for a in r["seconds"] if a != "off"}
    ctx.data["summary"] = summary
    if "0" in res:
        out["s1_speedup_t0"] = med(speedup(res["0"], main))
        out["s2_draft_share"] = repeats_estimate(np.mean(res["0"]["draft_share"][main], axis=1))
        same, n, mism = 0, 0, []
        for a in arms:
            if a == "off" or a.startswith("random:") and s.model != "tiny":
                continue
            for i, (x, y) in enumerate(zip(res["0"]["tokens"]["off"], res["0"]["tokens"][a])):
                n += 1
                same += x == y
                if x != y:
                    k = next((j for j, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
                    mism.append({"arm": a, "prompt": i, "first_divergence": k})
        ctx.data["t4_mismatches"] = mism
        out["t4_identical_share"] = Estimate.exact(same / n if n else float("nan"), n)
    if "1" in res:
        out["s1_speedup_t1"] = med(speedup(res["1"], main))
    rnd_arm = next((a for a in arms if a.startswith("random:")), None)
    if rnd_arm is not None:
        r0 = res[f"{temps[0]:g}"]
        out["nc6_tau"] = repeats_estimate(np.mean(r0["tau"][rnd_arm], axis=1))
        out["nc6_speedup"] = med(speedup(r0, rnd_arm))
    if s.model == "smollm2" and s.hf_prompts and getattr(s, "weights", "dense") == "dense":
        hf_path = ctx.work_dir / f"nc7-{s.hf_prompts}-{s.max_new}-t{s.threads}.json"
        if hf_path.exists():
            pairs = json.loads(hf_path.read_text())
        else:
            ctx.progress("NC7 engine vs transformers generate (pairs)", 0, None)
            pairs = _nc7_pairs(engine, prompts[: s.hf_prompts], s.max_new, s.threads, s.seed)
            hf_path.write_text(json.dumps(pairs))
        e, h = np.array(pairs).T
        ctx.data["nc7"] = {"engine_ar_tok_s": e.tolist(), "hf_tok_s": h.tolist()}
        out["nc7_ar_vs_hf"] = repeats_estimate(e / h, log=True)
    return out


def _random_like(drafter: Any, engine: Any) -> Any:
    """A drafter with the trained one's architecture and vocabulary but freshly initialised weights."""
    from agentmill.methods.dspark.drafter import DSparkDrafter

    return DSparkDrafter.init_for(engine, drafter.cfg, drafter.vocab, seed=12345)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()

    summ = data.get("summary")
    if not summ:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for T, arms in sorted(summ.items()):
        names = list(arms)
        axes[0].bar([f"{n}\nT={T}" for n in names], [arms[n]["median_speedup"] for n in names], alpha=0.8)
        axes[1].bar([f"{n}\nT={T}" for n in names], [arms[n]["tau"] for n in names], alpha=0.8)
    axes[0].axhline(1.0, color="k", lw=1)
    axes[0].axhline(1.5, color="g", lw=1, ls="--")
    axes[0].set_ylabel("median speedup over AR")
    axes[1].set_ylabel("acceptance length τ")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=6, rotation=60)
    fig.suptitle("E179-S1: single user, same engine")
    fig.tight_layout()
    p = out_dir / "e179_speed_single_user.png"
    save(fig, p, dpi=120)
    paths = [p]
    single = data.get("single", {})
    if "0" in single:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for a, st in single["0"]["stats"].items():
            al = st.get("alpha_by_position") or []
            if al and a != "off" and not a.startswith("ngram"):
                ax.plot(range(1, len(al) + 1), al, marker="o", label=a)
        ax.set_xlabel("draft position k")
        ax.set_ylabel("α_k (T = 0)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
        ax.set_title("Acceptance by position, single user")
        fig.tight_layout()
        p2 = out_dir / "e179_acceptance_by_position.png"
        save(fig, p2, dpi=120)
        paths.append(p2)
    return paths
