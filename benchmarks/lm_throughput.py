"""Throughput of the embedded models on this machine: load time, prefill and decode tokens/s, fp32 vs bf16, 2 vs 1
torch threads, batch 1 vs batched, and the cost of a forked branch vs a fresh prompt, for both backends: the
transformers model (``float32:1``) and the serving engine (``engine-dense:1``, ``engine-int8:1``: ``lm/engine``, what
``agentmill serve`` runs). A benchmark (ratios measured side by side in one run, medians of repeats), not a test.

    python benchmarks/lm_throughput.py [--models hf:smollm2,hf:qwen-coder-0.5b]
                                       [--configs float32:1,engine-dense:1,engine-int8:1]
                                       [--out benchmarks/results/lm_throughput.json] [--quick]

Torch's intra-op threads spin-wait on each other: on 2 cores, another busy process makes 2 threads many times
slower than 1. The load average is recorded before and after so a contended run can be recognised.
"""

from __future__ import annotations

import argparse
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
from agentmill.lm import load_lm  # noqa: E402

PROMPT = ("Solve step by step, then write 'Answer: <number>'. Question: What is 12 + 30 + 7? Solution: 12 + 30 = "
          "42. 42 + 7 = 49. Answer: 49. Question: What is 55 + 98 + 16? Solution:")


def _timed(fn, repeats: int) -> float:
    """Median wall time of ``repeats`` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(model: str, dtype: str, threads: int, *, prefill_len: int, decode_steps: int, batches: tuple[int, ...],
          branch_back: int, repeats: int) -> dict:
    import torch

    lm = load_lm(model, dtype=dtype)
    torch.set_num_threads(threads)  # process-wide; the loader set 2
    ids = (lm.encode(PROMPT) * 40)[:prefill_len]
    short = model.removeprefix("hf:")
    out: dict = {"config": f"{short}, {dtype}, {threads} thr", "model": model, "dtype": dtype, "threads": threads,
                 "n_params": lm.info.get("n_params"), "load_seconds": lm.info.get("load_seconds"),
                 "loaded_from": lm.info.get("loaded_from")}
    for b in batches:
        if b <= 4:  # prefill is compute-bound: tok/s barely moves past 4 rows and a batch of 8 costs seconds
            out[f"prefill_tok_s_b{b}"] = b * prefill_len / _timed(lambda b=b: lm.forward([ids] * b), repeats)
    # The LM head over every prompt position is a fixed share of a prefill; generation needs only the last row.
    out["prefill_last_logits_tok_s_b1"] = prefill_len / _timed(lambda: lm.forward([ids], logits_to_keep=1), repeats)
    for b in batches:
        cache0 = lm.forward([ids] * b).cache

        def decode(cache0=cache0, b=b):
            cache = lm.fork_cache(cache0)
            tok = torch.zeros((b, 1), dtype=torch.long)
            for _ in range(decode_steps):
                cache = lm.forward(tok, cache).cache

        t = _timed(decode, repeats)
        out[f"decode_tok_s_b{b}"] = b * decode_steps / t
        out[f"decode_step_ms_b{b}"] = 1000 * t / decode_steps
    # A branch off a shared prefix, two ways that leave the same tokens in the cache: forked = deep-copy the
    # parent's cache, crop to the branch point, re-feed 1 token, decode N; fresh = prefill prompt + prefix, decode N.
    full = lm.forward([ids]).cache
    branch_at = prefill_len - branch_back

    def forked():
        c = lm.crop_cache(lm.fork_cache(full), branch_at - 1)
        c = lm.forward([[ids[branch_at - 1]]], c).cache
        for _ in range(decode_steps):
            c = lm.forward([[0]], c).cache

    def fresh():
        c = lm.forward([ids[:branch_at]]).cache
        for _ in range(decode_steps):
            c = lm.forward([[0]], c).cache

    def fork_only():
        c = lm.crop_cache(lm.fork_cache(full), branch_at - 1)
        lm.forward([[ids[branch_at - 1]]], c)

    out["forked_branch_s"] = _timed(forked, repeats)
    out["fresh_prompt_s"] = _timed(fresh, repeats)
    out["branch_vs_fresh_ratio"] = out["forked_branch_s"] / out["fresh_prompt_s"]
    out["fork_overhead_s"] = _timed(fork_only, repeats)
    out["fork_cost_in_decode_steps"] = out["fork_overhead_s"] / (out["decode_step_ms_b1"] / 1000)
    return out


def bench_engine(model: str, weights: str, threads: int, *, prefill_len: int, decode_steps: int,
                 batches: tuple[int, ...], branch_back: int, repeats: int) -> dict:
    """The serving engine's side of :func:`bench`: the same prompt, prefill (logits of the last row, as serving needs)
    and one-token decode steps of ``b`` sequences in one ragged forward. A fork is a KV truncation, so the branch
    rows are the engine's truncate + re-feed + decode vs a fresh prefill + decode."""
    from agentmill.cli.serve import load_engine
    from agentmill.lm.engine.model import RaggedBatch

    t0 = time.perf_counter()
    engine, _ = load_engine(model, "float32", threads, max_model_len=prefill_len + decode_steps + 8, weights=weights)
    load_s = time.perf_counter() - t0
    ids = ([int(t) for t in engine.tokenizer.encode(PROMPT)] * 40)[:prefill_len]
    short = model.removeprefix("hf:")
    out: dict = {"config": f"{short}, engine {weights}, {threads} thr", "model": model, "dtype": f"engine-{weights}",
                 "threads": threads, "n_params": None, "load_seconds": round(load_s, 2),
                 "loaded_from": "engine (" + ("int8 weights" if weights == "int8" else "float32 weights") + ")"}

    def run(prompts: list[list[int]], steps: int) -> None:
        seqs = [engine.new_sequence() for _ in prompts]
        try:
            batch = RaggedBatch()
            for q, p in zip(seqs, prompts):
                batch.add(q, p, "last")
            engine.forward(batch)
            for _ in range(steps):
                batch = RaggedBatch()
                for q in seqs:
                    batch.add(q, [0], "last")
                engine.forward(batch)
        finally:
            for q in seqs:
                engine.free(q)

    for b in batches:
        if b <= 4:
            out[f"prefill_tok_s_b{b}"] = b * prefill_len / _timed(lambda b=b: run([ids] * b, 0), repeats)
    out["prefill_last_logits_tok_s_b1"] = out.get("prefill_tok_s_b1")
    for b in batches:
        t_all = _timed(lambda b=b: run([ids] * b, decode_steps), repeats)
        t_pre = _timed(lambda b=b: run([ids] * b, 0), repeats)
        step = max(t_all - t_pre, 1e-9) / decode_steps
        out[f"decode_tok_s_b{b}"] = b / step
        out[f"decode_step_ms_b{b}"] = 1000 * step
    branch_at = prefill_len - branch_back

    def forked():
        q = engine.new_sequence()
        try:
            engine.forward(RaggedBatch().add(q, ids, "last"))
            t1 = time.perf_counter()
            engine.truncate(q, branch_at - 1)
            engine.forward(RaggedBatch().add(q, [ids[branch_at - 1]], "last"))
            for _ in range(decode_steps):
                engine.forward(RaggedBatch().add(q, [0], "last"))
            return time.perf_counter() - t1
        finally:
            engine.free(q)

    def fresh():
        run([ids[:branch_at]], decode_steps)

    forked()
    out["forked_branch_s"] = statistics.median(forked() for _ in range(repeats))
    out["fresh_prompt_s"] = _timed(fresh, repeats)
    out["branch_vs_fresh_ratio"] = out["forked_branch_s"] / out["fresh_prompt_s"]
    out["fork_overhead_s"] = None
    out["fork_cost_in_decode_steps"] = None
    return out


ROWS = [  # (metric, label) in table order
    ("prefill_tok_s_b1", "prefill tok/s, batch 1"),
    ("prefill_tok_s_b4", "prefill tok/s, batch 4"),
    ("prefill_last_logits_tok_s_b1", "prefill tok/s, b1, last logits only"),
    ("decode_tok_s_b1", "decode tok/s, batch 1"),
    ("decode_tok_s_b4", "decode tok/s, batch 4"),
    ("decode_tok_s_b8", "decode tok/s, batch 8"),
    ("decode_step_ms_b1", "decode step ms, batch 1"),
    ("decode_step_ms_b8", "decode step ms, batch 8"),
    ("forked_branch_s", "forked branch s (fork+crop+1+N)"),
    ("fresh_prompt_s", "fresh prompt s (prefill+N)"),
    ("branch_vs_fresh_ratio", "forked / fresh"),
    ("fork_cost_in_decode_steps", "fork+crop+refeed, in decode steps"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lm_throughput.json"))
    ap.add_argument("--quick", action="store_true", help="shorter prompt, fewer steps and repeats (~1 min)")
    ap.add_argument("--models", default="hf:smollm2",
                    help="comma-separated model specs, e.g. hf:smollm2,hf:qwen-coder-0.5b (default hf:smollm2)")
    ap.add_argument("--configs", default="float32:2,float32:1,bfloat16:2",
                    help="comma-separated dtype:threads pairs run for every model; engine-dense:T and engine-int8:T "
                         "run the serving engine (float32 activations) instead of transformers")
    args = ap.parse_args()
    import torch
    import transformers

    kw = dict(prefill_len=128 if args.quick else 256, decode_steps=8 if args.quick else 32, batches=(1, 4, 8),
              branch_back=16 if args.quick else 32, repeats=2 if args.quick else 5)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    configs = [(c.split(":")[0], int(c.split(":")[1])) for c in args.configs.split(",")]
    rows = [bench_engine(m, dtype.removeprefix("engine-"), threads, **kw) if dtype.startswith("engine-")
            else bench(m, dtype, threads, **kw) for m in args.models.split(",") for dtype, threads in configs]
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.models} throughput (prefill {kw['prefill_len']} tok, decode {kw['decode_steps']} "
                        f"steps, branch {kw['branch_back']} back, median of {kw['repeats']})")
    table.add_column("metric")
    for r in rows:
        table.add_column(r["config"], justify="right")
    for key, label in [("load_seconds", "load s (this process)"), *ROWS]:
        table.add_row(label, *[f"{r[key]:.3g}" if r.get(key) is not None else "-" for r in rows])
    console = Console(width=110)
    console.print(table)
    console.print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
                  f"({os.cpu_count()} cpus; >0.5 before means another process competed for the cores)")
    result = {"machine": {"cpu": host_cpu(), "python": platform.python_version(), "platform": platform.platform(),
                          "cpus": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
                          "loadavg_before": load_before, "loadavg_after": load_after},
              "settings": {**kw, "quick": args.quick}, "wall_s": round(wall, 1), "results": rows}
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
