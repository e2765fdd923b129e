"""What each engine weight format costs in quality and buys in speed, on SmolLM2-135M (issue 21).

    python benchmarks/engine_weights.py [--formats dense,int8] [--prompts 24] [--new 48] [--reps 5]
                                        [--out benchmarks/results/engine_weights.json]

A format is adopted only with its measured cost beside its speed. Per format, against the float32 engine:

- **Quality** on held-out prompts (DSpark's test split, chat template): the float32 engine's greedy continuation
  of ``--new`` tokens is fed back teacher-forced; per position, KL(p_fp32 ‖ p_format) in nats and whether the two
  argmaxes agree. Then the format's own greedy continuation: the share of prompts whose whole continuation equals
  float32's, and the mean length of the common prefix.
- **Speed**: c(B) = seconds of one forward of B new tokens of one request after a ~200-token context (a verify
  block of B − 1 drafts; B = 1 is a plain decode step), median over ``--reps`` interleaved passes, and c(B)/c(1) —
  the quantity that decides whether speculation pays (docs/methods/dspark.md). Plain decoding tok/s at batch 1.

Formats are timed interleaved in each pass so machine noise hits them alike; the CPU, its vector extensions and
the load average before and after go into the output (hosts of this project differ: compare ratios within one
run). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.machine import host_cpu  # noqa: E402
from agentmill.core.records import write_json_atomic  # noqa: E402


def engines(formats: list[str], threads: int) -> dict:
    from agentmill.lm.engine import EngineConfig, LlamaEngine

    def cfg(f: str) -> EngineConfig:
        if f.startswith("int8-s"):
            a, _, k = f[6:].partition("-o")
            return EngineConfig(threads=threads, weights="int8", int8_smooth=float(a), int8_outliers=int(k or 0))
        return EngineConfig(threads=threads, weights=f)

    return {f: LlamaEngine.smollm2_135m(cfg(f)) for f in formats}


def quality(ref, eng, prompts: list[list[int]], new: int) -> dict:
    """KL and argmax agreement on float32's greedy continuations; exact-continuation share of the format's own."""
    import torch

    from agentmill.lm.engine import RaggedBatch, SamplingParams
    from agentmill.lm.session import common_prefix

    greedy = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    kls, agree, same, prefix = [], [], [], []
    for p in prompts:
        cont = ref.generate([p], greedy)[0]
        logits = {}
        for name, e in (("ref", ref), ("fmt", eng)):
            s = e.new_sequence()
            try:
                logits[name] = e.forward(RaggedBatch().add(s, p + cont[:-1], "all")).logits[len(p) - 1:]
            finally:
                e.free(s)
        lr, lf = logits["ref"].log_softmax(-1), logits["fmt"].log_softmax(-1)
        kls += (lr.exp() * (lr - lf)).sum(-1).tolist()
        agree += (lr.argmax(-1) == lf.argmax(-1)).tolist()
        own = eng.generate([p], greedy)[0]
        same.append(own == cont)
        prefix.append(common_prefix(own, cont))
    return {"kl_mean": statistics.fmean(kls), "kl_p95": float(torch.tensor(kls).quantile(0.95)),
            "kl_max": max(kls), "argmax_agreement": statistics.fmean(map(float, agree)),
            "positions": len(kls), "identical_continuations": sum(same), "prompts": len(prompts),
            "mean_common_prefix": statistics.fmean(prefix)}


def verify_costs(engs: dict, context: list[int], rows: list[int], reps: int) -> dict:
    """c(B) per format: one forward of B new tokens after ``context``, rolled back after each pass."""
    from agentmill.lm.engine import RaggedBatch

    seqs = {}
    for f, e in engs.items():
        seqs[f] = e.new_sequence()
        e.forward(RaggedBatch().add(seqs[f], context, "last"))
    n0 = len(context)
    ms: dict = {f: {} for f in engs}
    fmts = list(engs)
    for b in rows:
        block = [context[(i * 7) % n0] for i in range(b)]
        times: dict = {f: [] for f in fmts}
        for rep in range(reps + 1):  # the first pass warms up and is dropped
            for f in fmts[rep % len(fmts):] + fmts[: rep % len(fmts)]:
                e = engs[f]
                t0 = time.perf_counter()
                e.forward(RaggedBatch().add(seqs[f], block, "all"))
                dt = time.perf_counter() - t0
                e.truncate(seqs[f], n0)
                if rep:
                    times[f].append(dt * 1e3)
        for f in fmts:
            ms[f][b] = statistics.median(times[f])
    return {f: {b: {"ms": round(t, 3), "over_b1": round(t / ms[f][rows[0]], 3)} for b, t in ms[f].items()}
            for f in fmts}


def decode_rate(engs: dict, prompt: list[int], new: int, reps: int) -> dict:
    from agentmill.lm.engine import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    out: dict = {f: [] for f in engs}
    fmts = list(engs)
    for rep in range(reps):
        for f in fmts[rep % len(fmts):] + fmts[: rep % len(fmts)]:
            t0 = time.perf_counter()
            n = len(engs[f].generate([prompt], params)[0])
            out[f].append(n / (time.perf_counter() - t0))
    return {f: round(statistics.median(v), 2) for f, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--formats", default="dense,int8,int8-s0.5-o32",
                    help="engine weight formats: dense (float32), int8 (the defaults: SmoothQuant α 0.5, no outlier "
                         "product), int8-sA-oK (α = A, K outlier channels)")
    ap.add_argument("--prompts", type=int, default=24, help="held-out prompts for the quality measures")
    ap.add_argument("--new", type=int, default=48, help="greedy tokens per prompt")
    ap.add_argument("--seed", type=int, default=3,
                    help="prompt draw: the int8 design was explored on seed 1; the adoption rule judged the first "
                         "design on seed 2 and the second on seed 3 (docs/LOG.md)")
    ap.add_argument("--rows", default="1,2,3,4,6,8,12,16", help="B values of the verify-cost curve")
    ap.add_argument("--reps", type=int, default=5, help="interleaved timing passes (median)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--part", choices=("all", "quality", "timing"), default="all",
                    help="run only the quality or the timing part; the other part's results already in --out are kept "
                         "(time the formats on a quiet machine, whenever the quality was measured)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "engine_weights.json"))
    args = ap.parse_args(argv)
    import torch

    from agentmill.methods.dspark.data import builtin_prompts, chat_ids

    load_before = os.getloadavg()[0]
    fmts = args.formats.split(",")
    engs = engines(fmts, args.threads)
    tok = next(iter(engs.values())).tokenizer
    prompts = [chat_ids(tok, it.text) for it in builtin_prompts("test", args.prompts, seed=args.seed)]
    old = json.loads(Path(args.out).read_text()) if Path(args.out).exists() and args.part != "all" else {}
    t0 = time.time()
    qual, q_s = old.get("quality", {}), old.get("quality_seconds")
    if args.part != "timing":
        qual = {f: quality(engs[fmts[0]], engs[f], prompts, args.new) for f in fmts[1:]}
        q_s = round(time.time() - t0, 1)
    costs, rate = old.get("verify_cost", {}), old.get("decode_tok_s", {})
    if args.part != "quality":
        context = [t for p in prompts for t in p][:200]
        costs = verify_costs(engs, context, [int(r) for r in args.rows.split(",")], args.reps)
        rate = decode_rate(engs, prompts[0], 64, args.reps)
    rel = {f: {"qkv": statistics.fmean(L["qkv"].rel_error for L in engs[f].model.layers),
               "down": statistics.fmean(L["down"].rel_error for L in engs[f].model.layers),
               "head": engs[f].model.lm_head.rel_error, **(engs[f].quantization or {})}
           for f in fmts if f != "dense"}
    print(f"SmolLM2-135M engine, {args.threads} thread(s), CPU {host_cpu()}, load {load_before:.2f}")
    for f, q in qual.items():
        print(f"{f}: KL mean {q['kl_mean']:.4f} nats (p95 {q['kl_p95']:.4f}), argmax agreement "
              f"{q['argmax_agreement']:.3f}, identical {q['identical_continuations']}/{q['prompts']} greedy "
              f"continuations, mean common prefix {q['mean_common_prefix']:.1f}/{args.new}")
    print(f"{'format':<7} {'B':>3} {'ms':>8} {'c(B)/c(1)':>10}")
    for f in costs:
        for b, r in costs[f].items():
            print(f"{f:<7} {b:>3} {r['ms']:>8.2f} {r['over_b1']:>10.2f}")
    print("plain decode tok/s (batch 1): " + ", ".join(f"{f} {v}" for f, v in rate.items()))
    machine_key = "machine" if args.part != "quality" else "quality_machine"
    result = {**old, machine_key: {"cpu": host_cpu(), "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                          "python": platform.python_version(), "torch": torch.__version__,
                          "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "quantized_engine": torch.backends.quantized.engine,
                          "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)},
              "reference": fmts[0], "quality": qual, "quality_seconds": q_s, "verify_cost": costs,
              "decode_tok_s": rate, "weight_error": rel, "prompts": args.prompts, "seed": args.seed,
              "new_tokens": args.new, "reps": args.reps,
              f"date_{args.part}": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    write_json_atomic(args.out, result)
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
