"""Load-and-crash harness for the participant app (AC-10, an engineering claim [R]).

Many concurrent HTTP clients submit every trial of their session with duplicates, out-of-order writes (shuffled
within blocks of 4, inside the server's +8 window), retries and a few deliberately conflicting writes, while the
server process is ``kill -9``ed mid-stream and restarted on the same SQLite file. ``check`` then compares the
database with what the clients saw acknowledged. Shared by AC-10's experiment and its test, so the durability claim
and its unit check run the same code.
"""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

U8_DESIGN = {"validities": [0.9, 0.8, 0.7, 0.6], "rating_max": 1,
             "pairs_a": [[1, 0, 0, 0], [0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1],
                         [1, 0, 0, 1], [0, 1, 1, 0]],
             "pairs_b": [[0, 1, 1, 1], [1, 0, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0],
                         [0, 1, 1, 0], [1, 0, 0, 1]], "max_trials": 96}
"""The AC-9/AC-10 session: U = 8 binary pairs -> K = 12 repeats -> 96 trials, plus 4 catch trials = 100."""
SERVE = ("import sys\nfrom agentmill.methods.autocog.web.app import serve\n"
         "sys.exit(serve(db=sys.argv[1], port=int(sys.argv[2]), test_mode=True))\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(db: Path, port: int, *, timeout: float = 60.0) -> subprocess.Popen:
    """Start the app on 127.0.0.1:``port`` in test mode (own process, so it can be ``kill -9``ed)."""
    import httpx

    p = subprocess.Popen([sys.executable, "-c", SERVE, str(db), str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/s/nope", timeout=0.5)
            return p
        except httpx.HTTPError:
            if p.poll() is not None:
                break
            time.sleep(0.05)
    p.kill()
    p.wait()
    raise RuntimeError(f"participant server did not start on port {port}")


def prepare(c, token: str) -> None:
    """Consent and pass the quiz so the session accepts trials."""
    if c.post(f"/api/s/{token}/consent", json={"agree": True, "consent_version": "v1"}).status_code != 200:
        raise RuntimeError("consent failed")
    if c.post(f"/api/s/{token}/quiz", json={"best_expert": 0, "left_key": "f"}).json()["status"] != "in_task":
        raise RuntimeError("quiz failed")


@dataclass
class LoadLog:
    acked: dict[str, dict[int, str]] = field(default_factory=dict)
    """token -> trial_idx -> side the server acknowledged (200 stored/duplicate)."""
    injected: set[tuple[str, int]] = field(default_factory=set)
    """(token, trial_idx) where a conflicting write was sent and answered 409."""
    errors: list[str] = field(default_factory=list)
    ack_times: list[float] = field(default_factory=list)
    """Seconds since the load started at which each first acknowledgement arrived."""
    kill_at: float | None = None
    restart_at: float | None = None


def _put(c, tok: str, idx: int, side: str, tries: int = 200) -> int:
    import httpx

    for k in range(tries):
        try:
            r = c.put(f"/api/s/{tok}/trials/{idx}", json={"side_pressed": side, "rt_ms": 1500.0})
        except httpx.HTTPError:  # server down (killed) or connection reset: retry, as the browser's outbox does
            time.sleep(0.1)
            continue
        if r.status_code in (429, 503) or (r.status_code == 422 and "index" in r.text):
            time.sleep(0.06 * (1 + k % 5))
            continue
        return r.status_code
    return -1


def run_load(base: str, tokens: list[str], n_trials: int, *, seed: int = 0, dup_p: float = 0.2,
             conflict_p: float = 0.03, pace_s: float = 0.04, kill: tuple[subprocess.Popen, float] | None = None,
             restart=None) -> LoadLog:
    """One thread per token submits trials 0..n_trials-1; optionally kill ``kill[0]`` after ``kill[1]`` s and call
    ``restart()`` 0.3 s later. Returns what the clients saw."""
    import httpx

    if n_trials < 1 or not tokens:
        raise ValueError(f"need >= 1 token and n_trials >= 1, got {len(tokens)} tokens, n_trials={n_trials}")
    log = LoadLog(acked={t: {} for t in tokens})
    lock = threading.Lock()
    t0 = time.monotonic()

    def client(tok: str, k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        order = list(range(n_trials))
        for i in range(0, n_trials, 4):
            blk = order[i:i + 4]
            rng.shuffle(blk)
            order[i:i + 4] = blk
        with httpx.Client(base_url=base, timeout=5) as c:
            for idx in order:
                side = rng.choice("LR")
                code = _put(c, tok, idx, side)
                with lock:
                    if code != 200:
                        log.errors.append(f"{tok[:4]} trial {idx}: status {code}")
                        continue
                    log.acked[tok][idx] = side
                    log.ack_times.append(time.monotonic() - t0)
                if rng.random() < dup_p and _put(c, tok, idx, side) != 200:
                    with lock:
                        log.errors.append(f"{tok[:4]} duplicate of {idx} not accepted")
                if rng.random() < conflict_p:
                    got = _put(c, tok, idx, "R" if side == "L" else "L")
                    with lock:
                        if got == 409:
                            log.injected.add((tok, idx))
                        else:
                            log.errors.append(f"{tok[:4]} conflict on {idx} answered {got}")
                time.sleep(pace_s)

    threads = [threading.Thread(target=client, args=(t, k), daemon=True) for k, t in enumerate(tokens)]
    for th in threads:
        th.start()
    if kill is not None:
        proc, after = kill
        time.sleep(after)
        log.kill_at = time.monotonic() - t0
        proc.kill()  # SIGKILL: no shutdown hooks, no flush
        proc.wait()
        time.sleep(0.3)
        if restart is not None:
            restart()
            log.restart_at = time.monotonic() - t0
    for th in threads:
        th.join(timeout=600)
    return log


def check(store, log: LoadLog, n_trials: int) -> dict:
    """Counts of every durability violation; all zero = AC-10 holds for this run.

    Conflicts are compared as (session, trial) pairs, not attempt counts: a conflicting PUT whose 409 was lost to
    the kill is retried and logged twice, which is correct audit behaviour.
    """
    lost = dup = missing = 0
    sid_to_tok = {}
    for tok, acked in log.acked.items():
        sess = store.session(tok)
        sid_to_tok[sess["session_id"]] = tok
        rows = store.trials(sess["session_id"])
        stored = {r["trial_idx"]: r["side_pressed"] for r in rows}
        dup += len(rows) - len(stored)
        missing += sum(1 for i in range(n_trials) if i not in stored)
        lost += sum(1 for i, s in acked.items() if stored.get(i) != s)
    logged = {(sid_to_tok.get(r["session_id"]), r["trial_idx"]) for r in store.conflicts()}
    return {"lost_acked": lost, "duplicates": dup, "missing": missing,
            "spurious_conflicts": len(logged - log.injected), "unlogged_conflicts": len(log.injected - logged),
            "client_errors": len(log.errors), "injected_conflicts": len(log.injected),
            "acked": sum(len(a) for a in log.acked.values())}
