"""Serving benchmark (dspark spec §6.5 ``bench-serve``, §8): per-user tokens/s and throughput at several
concurrencies for each decoding policy, through a real ``agentmill serve`` subprocess on 127.0.0.1 and the closed-loop
load generator. Policies run side by side in one invocation, in ABBA order per concurrency, so a noisy neighbour
hits every arm alike; the server runs in its own process so the load generator never shares its GIL.

    python benchmarks/dspark_serving.py [--policies off,fixed:1,fixed:7,dspark-async,ngram:4]
        [--concurrency 1,2,4,8] [--duration 30] [--warmup 5] [--max-tokens 96] [--threads 1]
        [--out benchmarks/results/dspark_serving.json]

``fixed:1`` is the MTP-1-like baseline (the DSpark drafter truncated to one token), ``fixed:k`` verifies the whole
DSpark block up to k, ``dspark-async`` is the load-aware scheduler, ``ngram:K`` is prompt lookup, ``off`` is plain
decoding. The llama.cpp peer row needs ``llama-cpp-python`` (not installed by default: it compiles for ~9 min); the
result JSON says so when it is absent.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.records import write_json_atomic  # noqa: E402
from agentmill.methods.dspark.bench import serve_subprocess  # noqa: E402
from agentmill.serve.loadgen import run_closed_loop  # noqa: E402

PROMPTS = [
    "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the quiet river bank.",
    "Write a Python function that returns the sum of the squares of a list of numbers.",
    "Explain in three sentences why the sky is blue.",
    "Copy this list, one item per line: apples, oranges, pears, plums, cherries, grapes, lemons.",
    "What are the first ten prime numbers? List them separated by commas.",
    "Summarise: Cats are small domesticated carnivores. Cats are popular pets. Cats sleep a lot.",
]


@contextlib.contextmanager
def _server(policy: str, max_num_seqs: int, threads: int):
    args = ["--threads", str(threads), "--max-num-seqs", str(max_num_seqs), "--policy", policy]
    with serve_subprocess(args + (["--drafter", "none"] if policy == "off" else [])) as (url, port):
        yield url, port


def _metrics(port: int) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text):
        for smp in fam.samples:
            if smp.name.startswith("agentmill_spec") and not smp.labels:
                out[smp.name] = smp.value
    return out


def _llama_cpp_peer() -> dict[str, object]:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return {"skipped": "llama-cpp-python is not installed (it builds from source for ~9 min, so it stays out of "
                           "the default install; pip install llama-cpp-python to add this row)"}
    return {"skipped": "llama-cpp-python present but the peer row is not implemented yet"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="off,fixed:1,fixed:7,dspark-async,ngram:4")
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dspark_serving.json"))
    a = ap.parse_args()
    policies = a.policies.split(",")
    conc = [int(c) for c in a.concurrency.split(",")]
    load_before = os.getloadavg()[0]
    points: dict[str, list[dict]] = {p: [] for p in policies}
    stats: dict[str, dict] = {}
    for c in conc:
        order = policies + policies[::-1]            # ABBA: each arm runs twice, early and late
        halves: dict[str, list] = {p: [] for p in policies}
        for p in order:
            with _server(p, max(conc), a.threads) as (url, port):
                pt = run_closed_loop(url, "smollm2-135m", c, a.duration / 2, a.warmup, PROMPTS, a.max_tokens, 0.0)
                stats[p] = _metrics(port)
            halves[p].append(pt)
            print(f"C={c:2d} {p:10s} throughput {pt.throughput:6.1f} tok/s  per-user {pt.per_user_tps:6.1f} tok/s  "
                  f"requests {pt.requests} failed {pt.failed}", flush=True)
        for p in policies:
            h = halves[p]
            n = sum(x.requests for x in h)
            points[p].append({"concurrency": c, "requests": n, "failed": sum(x.failed for x in h),
                              "throughput": sum(x.throughput for x in h) / len(h),
                              "per_user_tps": sum(x.per_user_tps * x.requests for x in h if x.requests)
                              / max(n, 1),
                              "ttft_p50": sorted(x.ttft_p50 for x in h)[0], "halves": [x.as_dict() for x in h]})
    base = {pt["concurrency"]: pt for pt in points[policies[0]]}
    ratios = {p: {pt["concurrency"]: {"per_user": pt["per_user_tps"] / base[pt["concurrency"]]["per_user_tps"],
                                     "throughput": pt["throughput"] / base[pt["concurrency"]]["throughput"]}
                  for pt in points[p]} for p in policies[1:]}
    result = {"setup": vars(a), "machine": {"cpus": os.cpu_count(), "load_before": load_before,
                                            "load_after": os.getloadavg()[0]},
              "points": points, "ratios_vs_" + policies[0]: ratios, "engine_stats_last": stats,
              "llama_cpp": _llama_cpp_peer()}
    write_json_atomic(Path(a.out), result)
    for p, r in ratios.items():
        for c, v in r.items():
            print(f"{p} / {policies[0]} at C={c}: per-user {v['per_user']:.2f}x, throughput {v['throughput']:.2f}x")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
