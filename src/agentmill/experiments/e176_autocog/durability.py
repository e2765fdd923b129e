"""E176 AC-10: trial submission is idempotent and durable under load and a server crash (an engineering claim [R]).

25 concurrent HTTP clients (httpx, loopback) each submit the 100 trials of their session (U = 8 design: 96 + 4
catch) with 20% duplicate PUTs, out-of-order writes within blocks of 4, retries on 429/503/connection errors and
3% deliberately conflicting writes; the server process is ``kill -9``ed 2 s into the stream and restarted on the
same SQLite file. Violations counted: acknowledged trials lost or changed, duplicate rows, trials never stored,
conflicts logged where none was injected, injected conflicts not logged, and client requests that never got an
answer. The claim needs 0 in total (pre-registered [R]: nothing acknowledged may be lost or doubled, and conflicts
only where injected); the full profile repeats the whole run 3 times with different client seeds.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext



@dataclass(frozen=True)
class Setup:
    clients: int = 25
    """Concurrent participants (25 [R], the real N of one observation)."""
    trials: int = 100
    """Trials submitted per client (100 = the whole U = 8 session [R])."""
    kill_after_s: float = 2.0
    """Seconds into the stream at which the server gets SIGKILL (then a restart 0.3 s later)."""
    repeats: int = 1
    """Independent runs (fresh database, other client seeds); full: 3."""
    seed: int = 0


SETUPS = {"smoke": Setup(clients=3, trials=12, kill_after_s=0.5), "quick": Setup(), "full": Setup(repeats=3)}

CLAIMS = (
    Claim("E176-AC10", "Trial submission is idempotent and durable: under 25 concurrent clients with duplicate, "
          "out-of-order, retried and conflicting PUTs and a kill -9 of the server, no acknowledged trial is lost, "
          "none is duplicated and conflicts appear only where injected (total violations).",
          "[R] engineering claim of this project; rule pre-registered", "—",
          "ac10_violations", "<=", 0.0, judge_on="exact",
          exact_why="a count of lost, duplicated or unexpected trials: any one is a durability bug; scheduling noise "
                    "can hide a bug, never excuse one"),
)

VIOLATIONS = ("lost_acked", "duplicates", "missing", "spurious_conflicts", "unlogged_conflicts", "client_errors")


def one_run(s: Setup, rep: int, work: Path) -> dict[str, Any]:
    import httpx

    from agentmill.methods.autocog.web.loadtest import (U8_DESIGN, check, free_port, prepare, run_load,
                                                      start_server)
    from agentmill.methods.autocog.web.store import Store

    db = work / f"study{rep}.sqlite"
    st = Store(db)
    st.add_observation("o1", U8_DESIGN)
    port = free_port()
    procs = [start_server(db, port)]
    base = f"http://127.0.0.1:{port}"
    try:
        toks = st.create_sessions("o1", s.clients)
        with httpx.Client(base_url=base) as c:
            for t in toks:
                prepare(c, t)
        log = run_load(base, toks, s.trials, seed=s.seed + rep, kill=(procs[0], s.kill_after_s),
                       restart=lambda: procs.append(start_server(db, port)))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    res = check(st, log, s.trials)
    return {**res, "rep": rep, "ack_times": [round(x, 3) for x in sorted(log.ack_times)], "kill_at": log.kill_at,
            "restart_at": log.restart_at, "errors": log.errors[:20]}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    runs = []
    Path(ctx.work_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ac10-", dir=ctx.work_dir) as d:
        for rep in range(s.repeats):
            runs.append(one_run(s, rep, Path(d)))
            ctx.progress("AC-10 runs", rep + 1, s.repeats)
    ctx.data["runs"] = runs
    out = {"ac10_violations": Estimate.exact(sum(r[k] for r in runs for k in VIOLATIONS), n=len(runs))}
    for k in VIOLATIONS + ("injected_conflicts", "acked"):
        out[f"ac10_{k}"] = Estimate.exact(sum(r[k] for r in runs), n=len(runs))
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for r in data["runs"]:
        t = np.asarray(r["ack_times"])
        ax.plot(t, np.arange(1, len(t) + 1), lw=1.2, label=f"run {r['rep']}: {r['acked']} acked, "
                f"{sum(r[k] for k in VIOLATIONS)} violations")
        if r["kill_at"] is not None:
            ax.axvline(r["kill_at"], color="tab:red", ls="--", lw=1)
        if r["restart_at"] is not None:
            ax.axvline(r["restart_at"], color="tab:green", ls=":", lw=1)
    ax.set_xlabel("seconds (red dashed: kill -9 of the server; green dotted: restarted)")
    ax.set_ylabel("acknowledged trials (cumulative)")
    ax.set_title("AC-10: concurrent submission through a server crash", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "durability_timeline.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.durability",
    quick_budget_s=15,
    title="E176 AutoCog: trial submission survives load, duplicates and a server kill -9",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    requires=frozenset({"autocog-e2e"}),
    plots=plots,
    scale_note="Engineering claim, no model: 25 httpx clients × 100 trials on loopback against one uvicorn worker "
               "with SQLite (WAL, synchronous=FULL); one kill -9 per run (quick 1 run, full 3).",
)
