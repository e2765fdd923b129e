"""``optimize``: the KernelPro loop on one task, read top to bottom.

1. Stage 1: time the numpy reference and classify it on the measured roofline (the headroom caps rewards).
2. Search (MCTS by default) where evaluating a node means: render the candidate, compile it in the sandbox, run the
   correctness wall, time it interleaved with the reference, collect the cheap signals (assembly, roofline
   fractions) and run every tool whose affinity matches the Stage-1 class (proactive orchestration). The tools'
   recommended actions steer the proposer.
3. Every evaluated candidate is appended (fsynced) to ``<out_dir>/candidates.jsonl``; a rerun with the same
   ``out_dir`` reads it back and does not re-measure those candidates (resume).
4. Winner's curse guard: the top 3 by search-time speedup are re-timed in a fresh process with fresh inputs; only
   the re-measurement is reported as the result."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmill.methods.kernelpro import library, roofline, wall
from agentmill.methods.kernelpro.config import SearchConfig, TimingConfig, ToolThresholds, WallConfig
from agentmill.methods.kernelpro.library import Params, params_of
from agentmill.methods.kernelpro.search import Outcome, SearchResult, run_algo
from agentmill.methods.kernelpro.tables import key, profile_candidate
from agentmill.methods.kernelpro.tasks import get_task, shape_for
from agentmill.methods.kernelpro.tools import diagnose


@dataclass
class OptimizeResult:
    task: str
    search: SearchResult
    report: dict[str, Any]
    remeasured: list[dict[str, Any]] = field(default_factory=list)
    """Top candidates re-timed in a fresh process: params, search-time and re-measured speedup."""
    candidates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best_remeasured(self) -> dict[str, Any] | None:
        ok = [r for r in self.remeasured if r["ok"]]
        return max(ok, key=lambda r: r["speedup"]) if ok else None


def _append(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def optimize(task_name: str, *, algo: str = "mcts", search: SearchConfig = SearchConfig(), which: str = "full",
             wall_cfg: WallConfig = WallConfig(), timing: TimingConfig = TimingConfig(), ceilings: Any = None,
             out_dir: str | os.PathLike[str] | None = None, remeasure_top: int = 3,
             progress: Callable[[str, float, float | None], None] = lambda d, a, b: None) -> OptimizeResult:
    """Search the transformation library of ``task_name`` live (every candidate compiled, walled and timed)."""
    task = get_task(task_name)
    ceilings = ceilings if ceilings is not None else roofline.calibrate()
    shape = shape_for(task, "search")
    t_ref = roofline.time_reference(task, shape)  # 1. Stage 1
    report = roofline.classify_time(task, shape, t_ref, ceilings)
    s_cap = max(report.headroom, 1.5)
    done: dict[str, dict[str, Any]] = {}
    log = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        log = Path(out_dir) / "candidates.jsonl"
        if log.exists():  # 3. resume: candidates measured before are read back, not re-measured
            for line in log.read_text().splitlines():
                try:
                    row = json.loads(line)
                    done[row["key"]] = row
                except (ValueError, KeyError):
                    continue
    rows: list[dict[str, Any]] = []

    def evaluate(p: Params) -> Outcome:  # 2. compile → wall → time → signals → tools
        k = key(p)
        if k in done:
            row = done[k]
        else:
            src, flags = library.render(task_name, p)
            ev = wall.evaluate(task, src, flags, cfg=wall_cfg, timing=timing, ceilings=ceilings)
            rec: list = []
            findings: list[str] = []
            if ev.status == "correct":
                prof = profile_candidate(task_name, ev.so_path, flags, ev.t_cand, ceilings)
                fs, _ = diagnose(prof, report, ToolThresholds())
                findings = [f.tool for f in fs]
                rec = [list(x) for x in library.recommended_changes([a for f in fs for a in f.actions])]
            row = {"key": k, "params": dict(p), "source_sha": ev.key, "flags": list(flags), **ev.row(),
                   "findings": findings, "recommended": rec}
            row.pop("cand_samples", None)
            row.pop("ref_samples", None)
            if log is not None:
                _append(log, row)
            done[k] = row
        rows.append(row)
        progress(f"search {task_name}", len(rows), search.budget)
        ok = row["status"] == "correct"
        return Outcome(ok, float(row["speedup"]) if ok else float("nan"), tuple(tuple(x) for x in row["recommended"]))

    result = run_algo(algo, task_name, evaluate, search, which=which, s_cap=s_cap)
    # 4. winner's curse: re-time the top candidates in a fresh process with fresh inputs
    top = sorted((r for r in rows if r["status"] == "correct"), key=lambda r: -r["speedup"])
    seen: set[str] = set()
    picks = [r for r in top if not (r["key"] in seen or seen.add(r["key"]))][:remeasure_top]
    remeasured = []
    if picks:
        srcs = [library.render(task_name, params_of(r["params"])) for r in picks]
        evs = wall.evaluate_many(task, srcs, seed=1, cfg=wall_cfg,
                                 timing=TimingConfig(**{**timing.__dict__, "max_repeats": 30, "min_repeats": 30}),
                                 ceilings=ceilings)
        for r, ev in zip(picks, evs):
            remeasured.append({"params": r["params"], "search_speedup": r["speedup"], "speedup": ev.speedup,
                               "ok": ev.status == "correct"})
    return OptimizeResult(task_name, result, report.to_dict(), remeasured, rows)


def cached_table(task_name: str, which: str, *, exploits: tuple[str, ...] = (), include_honest: bool = True):
    """The exhaustively measured table of ``task_name`` if one for this machine and this code is cached, else None
    (never measures: ``tables.build`` does)."""
    from agentmill.core.paths import cache_root
    from agentmill.methods.kernelpro import tables

    name = (f"{task_name}-{which}-{'+'.join(exploits) or 'honest'}{'' if include_honest else '-only'}-"
            f"{tables.code_hash()}-s{tables.SCHEMA}.json")
    path = cache_root() / "kernelpro" / "tables" / roofline.fingerprint_key() / name
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    return tables.MeasuredTable(d["task"], d["which"], d["rows"], d["meta"])
