"""A closed-loop load generator for an OpenAI-compatible server [R]: C virtual users, each sending
its next streaming request as soon as the previous one finishes, for a warm-up and then a measured window.

Per-user speed follows the DSpark paper: the mean over requests finished in the window of
``(n_tokens − 1) / (t_last − t_first)``. It only talks to loopback hosts (127.0.0.0/8, ::1, localhost), with no
override, and every loop is bounded in count and time.
"""

from __future__ import annotations

import ipaddress
import json
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlparse


@dataclass
class LoadPoint:
    concurrency: int
    requests: int
    failed: int
    output_tokens: int
    wall_s: float
    throughput: float            # output tokens streamed inside the window / window length
    per_user_tps: float          # mean over requests of (n − 1)/(t_last − t_first)
    ttft_p50: float
    ttft_p95: float
    itl_p50: float
    load_average: float
    client_cpu_s: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def check_loopback(base_url: str) -> None:
    host = urlparse(base_url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"loadgen only targets loopback servers (127.0.0.0/8, ::1, localhost), not {host!r}")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_closed_loop(base_url: str, model: str, concurrency: int, duration_s: float, warmup_s: float,
                    prompts: list[str], max_tokens: int, temperature: float, *, max_requests: int = 10_000,
                    timeout_s: float = 120.0) -> LoadPoint:
    """Drive ``concurrency`` users against ``base_url`` (…/v1) with chat requests; measure after ``warmup_s``."""
    import httpx

    check_loopback(base_url)
    if concurrency < 1 or duration_s <= 0 or warmup_s < 0 or not prompts or max_tokens < 1:
        raise ValueError("need concurrency >= 1, duration > 0, warmup >= 0, prompts and max_tokens >= 1")
    t_start = time.perf_counter()
    t_measure, t_end = t_start + warmup_s, t_start + warmup_s + duration_s
    lock = threading.Lock()
    rows: list[dict[str, float]] = []
    failed = [0]
    issued = [0]
    window_tokens = [0.0]
    cpu0 = time.process_time()

    def user(u: int) -> None:
        with httpx.Client(base_url=base_url, timeout=timeout_s) as client:
            k = u
            while time.perf_counter() < t_end:
                with lock:
                    if issued[0] >= max_requests:
                        return
                    issued[0] += 1
                body = {"model": model, "messages": [{"role": "user", "content": prompts[k % len(prompts)]}],
                        "max_tokens": max_tokens, "temperature": temperature, "stream": True,
                        "stream_options": {"include_usage": True}}
                k += concurrency
                t0 = time.perf_counter()
                stamps: list[float] = []
                n_tokens = 0
                try:
                    with client.stream("POST", "/chat/completions", json=body) as r:
                        if r.status_code != 200:
                            raise RuntimeError(f"HTTP {r.status_code}")
                        for line in r.iter_lines():
                            if not line.startswith("data: ") or line == "data: [DONE]":
                                continue
                            ev = json.loads(line[6:])
                            if "error" in ev:
                                raise RuntimeError(ev["error"].get("message"))
                            if ev.get("usage"):
                                n_tokens = int(ev["usage"]["completion_tokens"])
                            for ch in ev.get("choices", []):
                                if ch.get("delta", {}).get("content"):
                                    stamps.append(time.perf_counter())
                except Exception:  # noqa: BLE001 - a failed request is counted, not fatal to the run
                    with lock:
                        failed[0] += 1
                    continue
                t1 = time.perf_counter()
                if not stamps:
                    continue
                n = n_tokens or len(stamps)
                # Throughput counts tokens *streamed inside the window*, whichever request they belong to: counting
                # only requests that finish inside it undercounts when a request lasts a sizeable part of the window
                # (at C = 8 and 4 tok/s per user, a 96-token request outlasts a 15 s window). A chunk can carry a
                # whole committed block, so each chunk is credited n / chunks tokens (exact when one token per chunk).
                per_chunk = n / len(stamps)
                in_window = sum(per_chunk for t in stamps if t_measure <= t <= t_end)
                with lock:
                    window_tokens[0] += in_window
                    if t_measure <= t1 <= t_end:
                        rows.append({"t0": t0, "t_first": stamps[0], "t_last": stamps[-1], "n": n})

    threads = [threading.Thread(target=user, args=(u,), daemon=True) for u in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=duration_s + warmup_s + timeout_s + 5)
    # Tokens come from the usage chunk: with speculation one streamed chunk can carry a whole committed block.
    tokens = int(round(window_tokens[0]))
    per_user = [(r["n"] - 1) / (r["t_last"] - r["t_first"]) for r in rows if r["n"] > 1 and r["t_last"] > r["t_first"]]
    itl = [(r["t_last"] - r["t_first"]) / (r["n"] - 1) for r in rows if r["n"] > 1]
    return LoadPoint(concurrency=concurrency, requests=len(rows), failed=failed[0], output_tokens=tokens,
                     wall_s=duration_s, throughput=tokens / duration_s,
                     per_user_tps=statistics.fmean(per_user) if per_user else float("nan"),
                     ttft_p50=_pct([r["t_first"] - r["t0"] for r in rows], 0.5),
                     ttft_p95=_pct([r["t_first"] - r["t0"] for r in rows], 0.95),
                     itl_p50=_pct(itl, 0.5), load_average=os.getloadavg()[0],
                     client_cpu_s=time.process_time() - cpu0)
