"""Serving benchmark (dspark spec §8): per-user tokens/s and throughput at several concurrencies, for each decoding
policy, through the real HTTP server and a closed-loop load generator. Policies are measured side by side in one
run, in ABBA order per concurrency, so a noisy neighbour hits every arm alike.

    python benchmarks/dspark_serving.py [--policies off,ngram:4] [--concurrency 1,2,4,8] [--duration 30]
                                        [--warmup 5] [--max-tokens 96] [--out benchmarks/results/dspark_serving.json]

Built so far: ``off`` (plain decoding) and ``ngram:K`` (prompt lookup). The fixed-k / MTP-1-like / DSpark arms need
the trained drafter, and the llama.cpp comparison needs ``llama-cpp-python`` (not installed: it compiles for ~9 min).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.records import write_json_atomic  # noqa: E402
from agentmill.lm.engine import EngineConfig, LlamaEngine  # noqa: E402
from agentmill.methods.dspark import NgramProposer, SpecEngine  # noqa: E402
from agentmill.serve import BatchingLoop, create_app  # noqa: E402
from agentmill.serve.loadgen import run_closed_loop  # noqa: E402

PROMPTS = [
    "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog near the quiet river bank.",
    "Write a Python function that returns the sum of the squares of a list of numbers.",
    "Explain in three sentences why the sky is blue.",
    "Copy this list, one item per line: apples, oranges, pears, plums, cherries, grapes, lemons.",
    "What are the first ten prime numbers? List them separated by commas.",
    "Summarise: Cats are small domesticated carnivores. Cats are popular pets. Cats sleep a lot.",
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server(target: LlamaEngine, policy: str, max_num_seqs: int):
    import uvicorn

    k = 0 if policy == "off" else int(policy.split(":")[1])
    loop = BatchingLoop(SpecEngine(target, NgramProposer(k=k) if k else None, verify_len=k,
                                   max_num_seqs=max_num_seqs)).start()
    port = _port()
    server = uvicorn.Server(uvicorn.Config(create_app(loop, served_model_name="smollm2-135m"), host="127.0.0.1",
                                           port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1", loop
    finally:
        server.should_exit = True
        th.join(10)
        loop.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="off,ngram:4")
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dspark_serving.json"))
    a = ap.parse_args()
    policies = a.policies.split(",")
    conc = [int(c) for c in a.concurrency.split(",")]
    target = LlamaEngine.smollm2_135m(EngineConfig(threads=a.threads))
    load_before = os.getloadavg()[0]
    points: dict[str, list[dict]] = {p: [] for p in policies}
    stats: dict[str, dict] = {}
    for c in conc:
        order = policies + policies[::-1]            # ABBA: each arm runs twice, early and late
        halves: dict[str, list] = {p: [] for p in policies}
        for p in order:
            with _server(target, p, max(conc)) as (url, loop):
                pt = run_closed_loop(url, "smollm2-135m", c, a.duration / 2, a.warmup, PROMPTS, a.max_tokens, 0.0)
                stats[p] = loop.stats
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
              "points": points, "ratios_vs_" + policies[0]: ratios, "engine_stats_last": stats}
    write_json_atomic(Path(a.out), result)
    for p, r in ratios.items():
        for c, v in r.items():
            print(f"{p} / {policies[0]} at C={c}: per-user {v['per_user']:.2f}x, throughput {v['throughput']:.2f}x")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
