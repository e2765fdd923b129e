"""E166 performance: P-C1 routing latency (ngram), P-C2 sep-CMA-ES time, P-C4 router server overhead.

P-C1: p50 of ``Router.route`` (features + matvec + masking) over the test queries, in 5 windows (the hidden-state
ratio needs the model and runs at full). P-C2: wall time of 60 sep-CMA-ES generations on the 720 training queries
(no early stop), estimated from three 20-generation windows of one run (×3 each). P-C4: the router server and a
direct server (same FastAPI stack, the worker called without routing) on 127.0.0.1, requests alternated; the p50 of
the paired difference per window. Timings name the machine's CPU; they run alone (``parallel_safe=False``).
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e166_router import PAPER
from agentmill.experiments.e166_router.outcomes import load_pool, table_reads
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold
from agentmill.methods.router import Router, RouterConfig

RM, DM = "agentmill-router", "direct"
SRC = "docs/methods/router.md (Claims) [R]; Fugu 'barely above a direct call' [S]"


@dataclass(frozen=True)
class Setup:
    table: str = "shipped"
    """``shipped``, ``standin`` (smoke) or a path."""
    windows: int = 5
    """Timing windows (repeats) for P-C1 and P-C4."""
    route_calls: int = 200
    """Route calls per P-C1 window."""
    requests: int = 30
    """Paired HTTP requests per P-C4 window (paced at ~16/s: the router server rate-limits each client)."""
    es_generations: int = 60
    """Generations timed for P-C2."""
    hidden_lm: str = ""
    """Also time hidden-state features of this model against one of its answers (full: ``hf:smollm2``)."""


SETUPS = {"smoke": Setup(table="standin", windows=2, route_calls=20, requests=5, es_generations=6),
          "quick": Setup(), "full": Setup(hidden_lm="hf:smollm2")}

CLAIMS = (
    Claim("P-C1", "Routing with ngram features takes ≤ 1 ms at the median", SRC, "—", "route_ms_p50", "<=", 1.0),
    Claim("P-C1h", "Hidden-state features cost ≤ 0.15 of one SmolLM2 answer", SRC, "~0.1 s prefill vs decode [D]",
          "hidden_over_answer", "<=", 0.15),
    Claim("P-C2", "60 sep-CMA-ES generations on the training split take ≤ 60 s", SRC, "—", "es60_seconds", "<=",
          60.0),
    Claim("P-C4", "The router server adds ≤ 5 ms (p50) over a direct worker call on loopback", SRC,
          "Fugu: barely above a direct call [S]", "serve_overhead_ms_p50", "<=", 5.0),
)


def _start_router_server(router_path: Path) -> tuple[Any, int]:
    """``agentmill serve --router`` in a child process on a free loopback port (experiments never import serve)."""
    import os
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentmill.cli.main", "serve", "--router", str(router_path),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={k: v for k, v in os.environ.items() if k != "AGENTMILL_API_KEY"})
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"router server exited: {proc.stderr.read().decode()[-500:]}") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("router server did not start within 60 s")


def _connect(port: int) -> Any:
    """A keep-alive client connection with Nagle off (else delayed ACKs add ~40 ms to every request on Linux)."""
    import http.client
    import socket
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _post(conn: Any, text: str, model: str) -> float:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        raise RuntimeError(f"server answered {r.status}")
    return time.perf_counter() - t0


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    pool = load_pool(s.table)
    if isinstance(pool, str):
        ctx.data["precondition"] = pool
        return {}
    ctx.data["precondition"] = "met"
    ctx.data["cpu"] = platform.processor() or platform.machine()
    router = Router(RouterConfig(es=False), pool.workers)
    router.fit_arrays(pool.X["train"], pool.Y["train"], pool.L["train"], pool.X["val"], pool.Y["val"],
                      pool.L["val"])
    texts = [pool.tasks.texts[q] for q in pool.ids["test"]]
    out: dict[str, Estimate] = {}

    # P-C1: route latency (features + head), median per window
    router.route(texts[0])  # warm the hash cache and imports
    p50 = []
    for w in range(s.windows):
        ts = []
        for i in range(s.route_calls):
            t0 = time.perf_counter()
            router.route(texts[(w * s.route_calls + i) % len(texts)])
            ts.append(1000 * (time.perf_counter() - t0))
        p50.append(float(np.median(ts)))
    out["route_ms_p50"] = repeats_estimate(p50, log=True)
    ctx.data["route_ms_p50_windows"] = p50

    # P-C2: 60 generations, timed per generation (no early stop)
    from agentmill.methods.router.head import evolve, fit_soft_targets, soft_targets
    P = soft_targets(pool.Y["train"], np.zeros_like(pool.Y["train"]), 0.0, 0.1)
    W0 = fit_soft_targets(pool.X["train"], P)
    rms = float(np.sqrt(np.mean(W0 ** 2)))
    _, rep = evolve(W0, pool.X["train"], pool.Y["train"], np.zeros_like(pool.Y["train"]), pool.X["val"],
                    pool.Y["val"], np.zeros_like(pool.Y["val"]), lam=0.0, w_div=0.0, generations=s.es_generations,
                    sigma0=0.03 * rms, popsize=None, batch=256, seed=0, patience=10**9)
    g = np.array(rep.gen_seconds)
    thirds = [float(x.sum()) * 60.0 / max(1, x.size) for x in np.array_split(g, 3)]
    out["es60_seconds"] = repeats_estimate(thirds)
    ctx.data["es"] = {"generations": int(g.size), "seconds": float(g.sum()), "n_params": rep.n_params,
                      "diag_spread": rep.diag_spread}

    # P-C4: `agentmill serve --router` (a solver-only router: workers answer in microseconds) vs a direct call to a
    # minimal OpenAI-compatible worker server (lm.loopback), both on 127.0.0.1, requests alternated
    import tempfile

    from agentmill.lm.loopback import LoopbackServer
    solvers = [i for i, w in enumerate(pool.workers) if w.startswith("solver:")]
    rs = Router(RouterConfig(es=False), [pool.workers[i] for i in solvers])
    rs.fit_arrays(pool.X["train"], pool.Y["train"][:, solvers], pool.L["train"][:, solvers], pool.X["val"],
                  pool.Y["val"][:, solvers], pool.L["val"][:, solvers])
    with tempfile.TemporaryDirectory() as d:
        rs.save(Path(d) / "router.json")
        proc, r_port = _start_router_server(Path(d) / "router.json")
        direct = LoopbackServer(lambda req: "42", model=DM).start()
        try:
            rc, dc = _connect(r_port), _connect(direct.port)
            _post(rc, texts[0], RM), _post(dc, texts[0], DM)
            diffs = []
            for w in range(s.windows):
                dd = []
                for i in range(s.requests):
                    t = texts[(w * s.requests + i) % len(texts)]
                    if i % 2 == 0:
                        a = _post(rc, t, RM)
                        b = _post(dc, t, DM)
                    else:
                        b = _post(dc, t, DM)
                        a = _post(rc, t, RM)
                    dd.append(1000 * (a - b))
                    time.sleep(0.06)  # stay under the server's per-client rate limit (20 requests/s)
                diffs.append(float(np.median(dd)))
            out["serve_overhead_ms_p50"] = repeats_estimate(diffs)
            ctx.data["serve_overhead_windows_ms"] = diffs
        finally:
            direct.stop()
            proc.terminate()
            proc.wait(timeout=10)

    if s.hidden_lm:
        from agentmill.methods.router.features import HiddenStateFeatures
        from agentmill.methods.router.workers import LMWorker
        lm = ctx.load_lm(s.hidden_lm)
        hf = HiddenStateFeatures(s.hidden_lm, "last", lm=lm)
        lmw = LMWorker(s.hidden_lm, lm, batch=1)
        ratios = []
        for t in texts[: s.windows * 4: 4]:
            t0 = time.perf_counter()
            hf.transform([t])
            th = time.perf_counter() - t0
            t0 = time.perf_counter()
            lmw.answer(t)
            ratios.append(th / (time.perf_counter() - t0))
        out["hidden_over_answer"] = repeats_estimate(ratios, log=True)
    else:
        withhold(ctx.data, ["hidden_over_answer"], "hidden-state features load SmolLM2: timed at full")
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    return []


EXPERIMENT = Experiment(
    id="e166.perf",
    title="E166 P-C1, P-C2, P-C4: routing latency, ES time, server overhead",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    reads=table_reads,
    parallel_safe=False,
    quick_budget_s=30,
    requires=frozenset({"router", "serve"}),
    scale_note="CPU timings on this machine (2 cores, shared); ngram features; a replay worker that answers "
               "instantly so P-C4 isolates the serving path. Hidden-state timing at full only.",
)
