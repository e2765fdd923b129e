"""The peer row: agentmill's engine (plain and DSpark) beside llama.cpp on the same GGUF, one process (issue 21).

    python benchmarks/engine_vs_llamacpp.py [--prompts 6] [--new 128] [--reps 2] [--threads 1]
                                            [--weights dense,int8] [--out benchmarks/results/engine_vs_llamacpp.json]

Needs ``llama-cpp-python`` (the optional ``llamacpp`` extra; it compiles llama.cpp for ~9 minutes, so it is in
neither of the README's two commands). Nothing is built here: without it the script says so and exits 2.

Every arm decodes every held-out prompt (DSpark's test split, chat template) alone at batch 1, greedy, ignoring EOS,
for ``--new`` tokens; the arms run interleaved per prompt with the order rotated every prompt and rep (ABBA-like),
so machine noise hits them alike. Arms:

- ``llama.cpp``: llama-cpp-python's ``Llama`` on SmolLM2's shipped GGUF (its own Q4_1/Q8_0 kernels), the same
  token ids fed in, top-k 1;
- ``engine/<w>``: this project's engine, plain decoding, weights ``<w>`` (dense = float32, int8);
- ``dspark/<w>``: the same engine with the shipped DSpark drafter and ``dspark-async`` scheduling — exactly what
  ``agentmill serve`` builds by default.

Reported per arm: tok/s = new tokens / wall seconds of the whole request (prefill included: the prompts are 30–60
tokens, a small share), median over prompts × reps; each arm's ratio to llama.cpp, computed per (prompt, rep) and
summarised by the median; and greedy agreement with llama.cpp (identical continuations, mean common prefix) — the
engine holds the GGUF's weights dequantised, so they differ only where the accumulation order flips a near-tie.
The CPU, its vector extensions, thread count and the load average before and after go into the output; compare
ratios within one run (hosts differ). A benchmark, not a test.
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

INSTALL = ("llama-cpp-python is not installed: pip install 'agentmill[llamacpp]' (llama-cpp-python 0.3.36; it compiles llama.cpp, ~9 min on "
           "2 cores; set CMAKE_ARGS='-DGGML_NATIVE=ON' to build for this CPU)")


class LlamaCppArm:
    """llama.cpp greedy decoding of given token ids, one request at a time."""

    def __init__(self, gguf: Path, threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         n_batch=512, verbose=False)

    def decode(self, prompt: list[int], new: int) -> tuple[list[int], float]:
        t0 = time.perf_counter()
        out: list[int] = []
        for tok in self.llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                     reset=True):
            out.append(int(tok))
            if len(out) == new:
                break
        return out, time.perf_counter() - t0


class EngineArm:
    """The served engine (plain or DSpark), one request at a time, as ``agentmill serve`` builds it."""

    def __init__(self, drafter: str, weights: str, threads: int) -> None:
        from agentmill.cli.serve import build_spec_engine

        policy = "off" if drafter == "none" else "dspark-async"
        self.spec, _ = build_spec_engine("hf:smollm2", drafter, policy, dtype="float32", threads=threads,
                                         max_model_len=2048, max_num_seqs=1, sps_table=None, weights=weights)

    def decode(self, prompt: list[int], new: int) -> tuple[list[int], float]:
        from agentmill.lm.engine import SamplingParams
        from agentmill.methods.dspark.bench import decode_alone

        return decode_alone(self.spec, prompt, SamplingParams(temperature=0, max_tokens=new, ignore_eos=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=6, help="held-out prompts (DSpark's test split)")
    ap.add_argument("--new", type=int, default=128, help="greedy tokens per request (EOS ignored)")
    ap.add_argument("--reps", type=int, default=2, help="passes over the prompts (arm order rotated each time)")
    ap.add_argument("--threads", type=int, default=1, help="threads for every arm (torch intra-op; llama.cpp)")
    ap.add_argument("--weights", default="dense,int8", help="engine weight formats to run, plain and with DSpark")
    ap.add_argument("--seed", type=int, default=3, help="held-out prompt draw")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "engine_vs_llamacpp.json"))
    args = ap.parse_args(argv)
    try:
        import llama_cpp
    except ImportError:
        print(INSTALL, file=sys.stderr)
        return 2
    import torch

    from agentmill.lm.hf import _smollm2_gguf
    from agentmill.lm.session import common_prefix
    from agentmill.methods.dspark.data import builtin_prompts, chat_ids

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    gguf = _smollm2_gguf()
    arms: dict = {"llama.cpp": LlamaCppArm(gguf, args.threads, n_ctx=2048)}
    for w in args.weights.split(","):
        arms[f"engine/{w}"] = EngineArm("none", w, args.threads)
        arms[f"dspark/{w}"] = EngineArm("dspark", w, args.threads)
    tok = arms[f"engine/{args.weights.split(',')[0]}"].spec.tok
    prompts = [chat_ids(tok, it.text) for it in builtin_prompts("test", args.prompts, seed=args.seed)]
    names = list(arms)
    for a in arms.values():  # warm-up: first-call allocations and lazy kernels stay out of the timings
        a.decode(prompts[0], 8)
    secs: dict = {k: [] for k in names}
    toks: dict = {k: [] for k in names}
    total, done = len(names) * len(prompts) * args.reps, 0
    for rep in range(args.reps):
        for i, p in enumerate(prompts):
            r = (i + rep) % len(names)
            order = names[r:] + names[:r]
            if (i + rep) % 2:  # ABBA: every other prompt runs the rotation backwards
                order = order[::-1]
            row = {}
            for k in order:
                t, s = arms[k].decode(p, args.new)
                row[k] = (t, s)
                done += 1
                print(f"\r{done}/{total} decodes", end="", file=sys.stderr, flush=True)
            for k, (t, s) in row.items():
                secs[k].append(s)
                if rep == 0:
                    toks[k].append(t)
    print(file=sys.stderr)
    ref = "llama.cpp"
    table = {}
    for k in names:
        tps = [args.new / s for s in secs[k]]
        ratios = [secs[ref][j] / secs[k][j] for j in range(len(secs[k]))]
        agree = [common_prefix(a, b) for a, b in zip(toks[k], toks[ref])]
        table[k] = {"tok_s_median": round(statistics.median(tps), 2), "tok_s_min": round(min(tps), 2),
                    "tok_s_max": round(max(tps), 2), "over_llamacpp_median": round(statistics.median(ratios), 3),
                    "over_llamacpp_range": [round(min(ratios), 3), round(max(ratios), 3)],
                    "identical_to_llamacpp": sum(a == b for a, b in zip(toks[k], toks[ref])),
                    "mean_common_prefix": round(statistics.fmean(agree), 1)}
    for w in args.weights.split(","):
        sp = [secs[f"engine/{w}"][j] / secs[f"dspark/{w}"][j] for j in range(len(secs[ref]))]
        table[f"dspark/{w}"]["over_plain_median"] = round(statistics.median(sp), 3)
        table[f"dspark/{w}"]["identical_to_plain"] = sum(
            a == b for a, b in zip(toks[f"dspark/{w}"], toks[f"engine/{w}"]))
    load_after = os.getloadavg()[0]
    print(f"SmolLM2-135M, {args.threads} thread(s), {args.prompts} prompts × {args.reps} reps × {args.new} tokens, "
          f"CPU {host_cpu().get('model')} ({torch.backends.cpu.get_cpu_capability()}), "
          f"load {load_before:.2f} → {load_after:.2f}")
    print(f"{'arm':<14} {'tok/s':>7} {'÷ llama.cpp':>12} {'same as llama.cpp':>18}")
    for k, r in table.items():
        extra = f"  DSpark/plain {r['over_plain_median']:.2f}×" if "over_plain_median" in r else ""
        print(f"{k:<14} {r['tok_s_median']:>7.2f} {r['over_llamacpp_median']:>11.2f}× "
              f"{r['identical_to_llamacpp']:>8}/{len(prompts)} (prefix {r['mean_common_prefix']}){extra}")
    result = {"machine": {"cpu": host_cpu(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "threads": args.threads, "cpus": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__, "llama_cpp_python": llama_cpp.__version__,
                          "load_before": round(load_before, 2), "load_after": round(load_after, 2)},
              "gguf": gguf.name, "prompts": args.prompts, "reps": args.reps, "new_tokens": args.new,
              "seed": args.seed, "arms": table, "seconds": secs,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    write_json_atomic(args.out, result)
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
