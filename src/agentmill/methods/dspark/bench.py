"""Measuring speculative decoding on the engine itself (claims S1, La,
Lc of docs/methods/dspark.md): single-user paired timings and an engine-direct closed loop of virtual users.

Per-user TPS follows the paper: the mean over requests finished inside the window of ``(n_tokens − 1)/(t_last −
t_first)`` (decode speed after the first token). Throughput is committed output tokens per second of window.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class LoadPoint:
    policy: str
    concurrency: int
    throughput: float
    per_user_tps: float
    finished: int
    tokens: int
    wall_s: float
    tau: float
    verify_tokens_per_round: float
    ttft_p50: float
    itl_p50: float
    loadavg: float
    per_request_tps: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def closed_loop(spec_engine: Any, prompts: Sequence[list[int]], params: Any, *, concurrency: int,
                duration_s: float, warmup_s: float, policy: str = "") -> LoadPoint:
    """Keep ``concurrency`` requests in flight on ``spec_engine`` (a fresh request replaces each finished one,
    prompts taken round-robin) for ``warmup_s + duration_s``; measure the window after the warm-up."""
    if concurrency < 1 or duration_s <= 0 or warmup_s < 0:
        raise ValueError("need concurrency >= 1, duration > 0, warmup >= 0")
    live: dict[int, dict[str, Any]] = {}
    nxt = 0

    def submit() -> None:
        nonlocal nxt
        rid = spec_engine.add_request(prompts[nxt % len(prompts)], params)
        live[rid] = {"t0": time.perf_counter(), "times": []}
        nxt += 1

    for _ in range(concurrency):
        submit()
    t_start = time.perf_counter()
    w0, w1 = t_start + warmup_s, t_start + warmup_s + duration_s
    tokens_in_window = 0
    done: list[dict[str, Any]] = []
    s0 = None
    while True:
        now = time.perf_counter()
        if s0 is None and now >= w0:
            s0 = dict(spec_engine.stats.as_dict())
        if now >= w1:
            break
        outs = spec_engine.step()
        t = time.perf_counter()
        for o in outs:
            rec = live.get(o.rid)
            if rec is None:
                continue
            if o.error:
                raise RuntimeError(f"request {o.rid} failed: {o.error}")
            if o.token_ids:
                rec["times"] += [t] * len(o.token_ids)
                if w0 <= t < w1:
                    tokens_in_window += len(o.token_ids)
            if o.finish_reason:
                rec["t_end"] = t
                done.append(live.pop(o.rid))
                submit()
    for rid in list(live):
        spec_engine.abort(rid)
    s1 = spec_engine.stats.as_dict()
    s0 = s0 or s1
    win = [r for r in done if r["t_end"] >= w0 and len(r["times"]) > 1 and r["times"][-1] > r["times"][0]]
    per_req = [(len(r["times"]) - 1) / (r["times"][-1] - r["times"][0]) for r in win]
    rounds = s1["rounds"] - s0["rounds"]
    ttft = [r["times"][0] - r["t0"] for r in win]
    itl = [np.diff(r["times"]).mean() for r in win]
    return LoadPoint(policy=policy, concurrency=concurrency, throughput=tokens_in_window / duration_s,
                     per_user_tps=float(np.mean(per_req)) if per_req else float("nan"), finished=len(win),
                     tokens=tokens_in_window, wall_s=duration_s,
                     tau=(s1["committed"] - s0["committed"]) / rounds if rounds else 1.0,
                     verify_tokens_per_round=(s1["verify_tokens"] - s0["verify_tokens"]) / rounds if rounds else 1.0,
                     ttft_p50=float(np.median(ttft)) if ttft else float("nan"),
                     itl_p50=float(np.median(itl)) if itl else float("nan"), loadavg=os.getloadavg()[0],
                     per_request_tps=[float(x) for x in per_req])


def pareto(points: Sequence[LoadPoint]) -> list[tuple[float, float]]:
    """(throughput, per-user TPS) points not dominated by another, sorted by throughput."""
    pts = sorted(((p.throughput, p.per_user_tps) for p in points if math.isfinite(p.per_user_tps)),
                 key=lambda x: x[0])
    out: list[tuple[float, float]] = []
    for x, y in pts:
        out = [(a, b) for a, b in out if not (x >= a and y >= b)]
        if not any(a >= x and b >= y for a, b in out):
            out.append((x, y))
    return sorted(out)


def envelope(front: list[tuple[float, float]], x: float) -> float:
    """Per-user TPS reachable at throughput ``x``: linear interpolation along the frontier (NaN outside it)."""
    xs = [a for a, _ in front]
    if not front or x < xs[0] - 1e-12 or x > xs[-1] + 1e-12:
        return float("nan")
    return float(np.interp(x, xs, [b for _, b in front]))


def matched_throughput_ratios(a: Sequence[LoadPoint], b: Sequence[LoadPoint], n: int = 20) -> dict[str, Any]:
    """Per-user TPS of ``a`` over ``b`` at ``n`` log-spaced throughputs over the overlap of their frontiers."""
    fa, fb = pareto(a), pareto(b)
    if len(fa) < 1 or len(fb) < 1:
        return {"n": 0, "geomean": float("nan")}
    lo, hi = max(fa[0][0], fb[0][0]), min(fa[-1][0], fb[-1][0])
    if not (hi > lo > 0):
        return {"n": 0, "geomean": float("nan"), "overlap": [lo, hi]}
    xs = np.geomspace(lo, hi, n)
    r = np.array([envelope(fa, x) / envelope(fb, x) for x in xs])
    r = r[np.isfinite(r)]
    return {"n": int(len(r)), "geomean": float(np.exp(np.log(r).mean())) if len(r) else float("nan"),
            "min": float(r.min()) if len(r) else float("nan"), "max": float(r.max()) if len(r) else float("nan"),
            "overlap": [float(lo), float(hi)], "throughputs": xs.tolist(), "ratios": r.tolist()}


def decode_alone(spec_engine: Any, prompt: list[int], params: Any) -> tuple[list[int], float]:
    """One request alone on the engine: (tokens, seconds from submission to the last token)."""
    t0 = time.perf_counter()
    rid = spec_engine.add_request(prompt, params)
    toks: list[int] = []
    while spec_engine.has_work():
        for o in spec_engine.step():
            if o.error:
                raise RuntimeError(o.error)
            if o.rid == rid:
                toks += o.token_ids
    return toks, time.perf_counter() - t0


def paired_single_user(arms: dict[str, Callable[[], Any]], prompts: Sequence[list[int]], params: Any, *,
                       reps: int = 1, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Every arm on every prompt, arms interleaved per prompt (rotated order per rep), one request at a time.
    ``arms`` map a name to a factory of a fresh ``SpecEngine`` (fresh so no state leaks between arms).

    Returns ``seconds[arm]``, ``draft_share[arm]`` and ``tau[arm]`` as [prompt][rep] lists (the drafter's share of
    the engine's draft + target seconds, and committed tokens per round, within that one decode: per-decode values,
    so each gets an interval over decodes), the tokens of each arm's last rep per prompt, and each arm's pooled
    ``stats``."""
    names = list(arms)
    engines = {k: f() for k, f in arms.items()}
    secs = {k: np.zeros((len(prompts), reps)) for k in names}
    share = {k: np.zeros((len(prompts), reps)) for k in names}
    tau = {k: np.zeros((len(prompts), reps)) for k in names}
    toks: dict[str, list[list[int]]] = {k: [[] for _ in prompts] for k in names}
    stats_before = {k: dict(e.stats.as_dict()) for k, e in engines.items()}
    for rep in range(reps):
        for i, p in enumerate(prompts):
            order = names[(i + rep) % len(names):] + names[: (i + rep) % len(names)]
            for k in order:
                st = engines[k].stats
                d0, g0, c0, r0 = st.draft_seconds, st.target_seconds, st.committed, st.rounds
                t, s = decode_alone(engines[k], p, params)
                d, g = st.draft_seconds - d0, st.target_seconds - g0
                secs[k][i, rep] = s
                share[k][i, rep] = d / max(1e-9, d + g)
                tau[k][i, rep] = (st.committed - c0) / (st.rounds - r0) if st.rounds > r0 else 1.0
                toks[k][i] = t
                if progress is not None:
                    progress(1)
    out = {"seconds": {k: v.tolist() for k, v in secs.items()},
           "draft_share": {k: v.tolist() for k, v in share.items()}, "tau": {k: v.tolist() for k, v in tau.items()},
           "tokens": toks, "stats": {}}
    for k, e in engines.items():
        s1, s0 = e.stats.as_dict(), stats_before[k]
        rounds = s1["rounds"] - s0["rounds"]
        out["stats"][k] = {"tau": (s1["committed"] - s0["committed"]) / rounds if rounds else 1.0,
                           "draft_share": (s1["draft_seconds"] - s0["draft_seconds"]) / max(
                               1e-9, (s1["draft_seconds"] - s0["draft_seconds"]) + (s1["target_seconds"]
                                                                                    - s0["target_seconds"])),
                           "alpha_by_position": s1["alpha_by_position"]}
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_subprocess(serve_args: list[str], *, timeout_s: float = 600.0) -> Iterator[tuple[str, int]]:
    """``agentmill serve <serve_args>`` on a free loopback port in a child process; yields (base URL …/v1, port)
    once ``/health`` answers (the first DSpark start profiles its SPS table, hence the generous timeout), and
    always stops the child — also when this process is killed outright (the child gets SIGKILL with its parent on
    Linux). The server's output goes to a temporary file, not a pipe nobody reads (a full pipe would block it)."""
    import subprocess
    import sys
    import tempfile

    import httpx

    from agentmill.core.executor import preexec_die_with_parent

    port = free_port()
    args = [sys.executable, "-m", "agentmill.cli.main", "serve", "--port", str(port), *serve_args]
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, preexec_fn=preexec_die_with_parent())

    def output_tail() -> str:
        log.seek(0)
        return log.read()[-2000:]

    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"agentmill serve {' '.join(serve_args)} exited: {output_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agentmill serve {' '.join(serve_args)} did not come up in {timeout_s:g} s")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/v1", port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
