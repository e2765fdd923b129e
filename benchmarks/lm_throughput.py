"""Throughput of the embedded SmolLM2 on this machine: prefill and decode tokens/s, fp32 vs bf16, batch 1 vs
batched, and the cost of a forked branch vs a fresh prompt. A benchmark (ratios measured side by side in one
run), not a test.

    python benchmarks/lm_throughput.py [--out benchmarks/results/lm_throughput.json] [--quick]
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


def bench(dtype: str, *, prefill_len: int, decode_steps: int, batches: tuple[int, ...], repeats: int) -> dict:
    import torch

    lm = load_lm("hf:smollm2", dtype=dtype)
    ids = (lm.encode(PROMPT) * 20)[:prefill_len]
    out: dict = {"dtype": dtype}
    t = _timed(lambda: lm.forward([ids]), repeats)
    out["prefill_tok_s"] = prefill_len / t
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
    # A forked branch (copy + crop to the branch point + re-feed 1 token + decode N) vs a fresh prompt
    # (prefill prompt + prefix, decode N). Both end with the same tokens in the cache.
    full = lm.forward([ids]).cache
    branch_at = prefill_len - 32

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
    out["fork_overhead_s"] = _timed(fork_only, repeats)
    out["decode_step_s_b1"] = out["decode_step_ms_b1"] / 1000
    out["fork_cost_in_decode_steps"] = out["fork_overhead_s"] / out["decode_step_s_b1"]
    out["branch_vs_fresh_ratio"] = out["forked_branch_s"] / out["fresh_prompt_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "lm_throughput.json"))
    ap.add_argument("--quick", action="store_true", help="fewer repeats and steps")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    kw = dict(prefill_len=256, decode_steps=8 if args.quick else 32, batches=(1, 4, 8),
              repeats=2 if args.quick else 5)
    rows = [bench(d, **kw) for d in ("float32", "bfloat16")]
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"hf:smollm2 throughput ({torch.get_num_threads()} threads, prefill {kw['prefill_len']} tok)")
    keys = ["prefill_tok_s", "decode_tok_s_b1", "decode_tok_s_b4", "decode_tok_s_b8", "decode_step_ms_b1",
            "forked_branch_s", "fresh_prompt_s", "branch_vs_fresh_ratio", "fork_cost_in_decode_steps"]
    table.add_column("metric")
    for r in rows:
        table.add_column(r["dtype"], justify="right")
    for k in keys:
        table.add_row(k, *[f"{r[k]:.3g}" for r in rows])
    Console().print(table)
    result = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "torch": torch.__version__, "threads": torch.get_num_threads()},
              "settings": kw, "results": rows}
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
