"""How long the main job takes: per-experiment wall time, each experiment's quick budget, and the suite's total.

    python benchmarks/suite_time.py [--profile quick] [--jobs 2] [--runs-dir DIR] [--read-only | --committed]
                                    [--out benchmarks/results/suite_time.json]

Runs ``agentmill reproduce --profile <profile> --fresh`` into a fresh runs dir (a temporary one unless
``--runs-dir`` is given) and times it as a whole; ``--read-only`` skips the run and reads the records already in
``--runs-dir``; ``--committed`` runs nothing either and reads the wall times of the committed summaries in
``results/<profile>/`` (each measured when that record was made, so on different days and loads). Prints one row per
experiment, slowest first, with its budget and how far over it the run went; then the sum of the experiments' own
times and the suite's wall time (with ``--jobs`` > 1 the sum exceeds the wall); and a projection of the wall time:
every experiment's time divided by ``--jobs``, since the timing lane runs beside the pool, but never less than the
timing lane alone (a lower bound: model experiments wait for the lane, and the pool's last job may leave a worker
idle).

The main job must fit: 7 papers in ≤ 20 minutes on 2 cores, all 18 in ≤ 30 (issue 24). The CPU model, its vector
extensions and the load average before and after go into the output: on 2 shared cores a busy neighbour distorts
wall times, and hosts differ (AVX2-only and AVX-512 machines both run this project). This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.machine import host_cpu
from agentmill.core.records import write_json_atomic  # noqa: E402
from agentmill.experiments import registry  # noqa: E402
from agentmill.experiments.runner import BUDGET_FACTOR, load_record  # noqa: E402


def rows(runs_dir: Path | None, profile: str) -> list[dict]:
    """One row per registered experiment, from its record in ``runs_dir`` or (None) its committed summary."""
    out = []
    for exp_id, exp in registry().items():
        if runs_dir is None:
            path = ROOT / "results" / profile / f"{exp_id}.json"
            summary = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
            status, seconds = (summary["status"], summary["wall_seconds"]) if summary else ("no summary", None)
        else:
            rec = load_record(runs_dir, profile, exp_id)
            status, seconds = (rec.status, rec.wall_seconds) if rec else ("not run", None)
        budget = exp.quick_budget_s if profile == "quick" else None
        out.append({"id": exp_id, "status": status, "seconds": round(seconds, 1) if seconds is not None else None,
                    "budget": budget, "pooled": exp.parallel_safe,
                    "over": bool(seconds is not None and budget is not None and seconds > BUDGET_FACTOR * budget)})
    return sorted(out, key=lambda r: -(r["seconds"] or 0))


def projection(table: list[dict], jobs: int) -> dict:
    """Pooled CPU-seconds, the timing lane's seconds, and the wall time they imply on ``jobs`` workers (the lane runs
    beside the pool when ``jobs`` > 1, after it otherwise)."""
    pooled = sum(r["seconds"] or 0 for r in table if r["pooled"])
    alone = sum(r["seconds"] or 0 for r in table if not r["pooled"])
    wall = max(alone, (pooled + alone) / jobs) if jobs > 1 else pooled + alone
    return {"pooled_cpu_seconds": round(pooled, 1), "alone_seconds": round(alone, 1),
            "projected_wall_seconds": round(wall, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="quick", choices=("smoke", "quick", "full"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs-dir", default=None, help="where the records go (default: a fresh temporary directory)")
    ap.add_argument("--read-only", action="store_true", help="read the records in --runs-dir; run nothing")
    ap.add_argument("--committed", action="store_true",
                    help="read the committed summaries in results/<profile>/; run nothing")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "suite_time.json"))
    args = ap.parse_args(argv)
    if args.read_only and not args.runs_dir:
        ap.error("--read-only needs --runs-dir")
    if args.committed and (args.read_only or args.runs_dir):
        ap.error("--committed reads results/; it takes neither --read-only nor --runs-dir")
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="agentmill-suite-"))
    load_before, wall = os.getloadavg()[0], None
    if not (args.read_only or args.committed):
        cmd = [sys.executable, "-m", "agentmill.cli.main", "reproduce", "--profile", args.profile, "--fresh",
               "--jobs", str(args.jobs), "--runs-dir", str(runs_dir), "--report-dir", str(runs_dir / "report")]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        wall = time.perf_counter() - t0
        if done.returncode not in (0, 1):  # 1: some experiment failed; its record says which
            print(f"reproduce exited {done.returncode}", file=sys.stderr)
            return done.returncode
    table = rows(None if args.committed else runs_dir, args.profile)
    print(f"{'experiment':<40} {'seconds':>8} {'budget':>7}  status")
    for r in table:
        secs = f"{r['seconds']:.1f}" if r["seconds"] is not None else "-"
        budget = f"{r['budget']:g}" if r["budget"] is not None else "-"
        over = f"  over {BUDGET_FACTOR:g}× budget" if r["over"] else ""
        alone = "" if r["pooled"] else "  (timing lane)"
        print(f"{r['id']:<40} {secs:>8} {budget:>7}  {r['status']}{alone}{over}")
    total = sum(r["seconds"] or 0 for r in table)
    suite = f"; suite wall {wall:.0f} s ({wall / 60:.1f} min)" if wall else ""
    print(f"sum of experiment times {total:.0f} s{suite}")
    proj = projection(table, args.jobs)
    print(f"pooled {proj['pooled_cpu_seconds']:.0f} CPU-s + timing lane {proj['alone_seconds']:.0f} s on {args.jobs} "
          f"workers ≈ {proj['projected_wall_seconds'] / 60:.1f} min of wall (a lower bound)")
    result = {"machine": {"cpu": host_cpu(), "cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)},
              "profile": args.profile, "jobs": args.jobs, "suite_wall_seconds": round(wall, 1) if wall else None,
              "source": "results/ (committed summaries)" if args.committed else "runs",
              "sum_experiment_seconds": round(total, 1), **proj, "experiments": table}
    write_json_atomic(args.out, result)
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
