"""The data every E166 experiment starts from: RouteTasks, the outcome matrices of the worker pool, the features.

quick/full replay the committed table ``assets/router/smollm2-135m/route_tasks.jsonl`` (SmolLM2 cells recorded
once, greedy, plus the solver cells); nothing loads a model. When that table is absent or lacks SmolLM2 cells for
some query, the run records ``precondition not met: no recorded SmolLM2 table`` and judges nothing. smoke builds a
small in-memory table from the solvers and a scripted stand-in for the LM column (never judged).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.envs.route_tasks import RouteTasks, verify
from agentmill.methods.router.table import LM_WORKER, OutcomeTable, shipped_table

SOLVER_POOL = ("solver:arith", "solver:string", "solver:date", "solver:unit", "solver:lookup")
STANDIN = "scripted:standin"
NO_TABLE = "precondition not met: no recorded SmolLM2 table"


@dataclass
class Pool:
    tasks: RouteTasks
    table: OutcomeTable
    workers: list[str]
    ids: dict[str, list[str]]
    Y: dict[str, np.ndarray]
    L: dict[str, np.ndarray]
    A: dict[str, np.ndarray]
    """Abstention masks (answer is None), per split."""
    X: dict[str, Any]
    source: str


def standin_answer(q: Any) -> str | None:
    """A scripted stand-in for the LM column (smoke only): right on about 70 % of label questions, 30 % of
    the rest, decided by a hash of the query id."""
    h = zlib.crc32(q.qid.encode()) % 100
    if q.kind == "label":
        return q.answer if h < 70 else ("no" if q.answer != "no" else "yes")
    return q.answer if h < 30 else "0"


def solver_rows(tasks: RouteTasks, workers: tuple[str, ...]) -> list[dict]:
    from agentmill.methods.router.workers import make_worker
    rows = []
    for spec in workers:
        w = make_worker(spec)
        for q in tasks.queries:
            r = w.answer(q.text)
            rows.append({"query_id": q.qid, "worker": spec, "answer": r.answer, "score": verify(q, r.answer),
                         "cost": r.cost, "latency": r.latency})
    return rows


def smoke_table(tasks: RouteTasks) -> OutcomeTable:
    rows = solver_rows(tasks, SOLVER_POOL)
    for q in tasks.queries:
        a = standin_answer(q)
        rows.append({"query_id": q.qid, "worker": STANDIN, "answer": a, "score": verify(q, a), "cost": 0.9,
                     "latency": 0.9})
    return OutcomeTable.from_long(rows)


def stale_solvers(tab: OutcomeTable) -> list[str]:
    """Solvers whose recorded fingerprint differs from the current code's (their cells must be re-recorded)."""
    from agentmill.methods.router.workers import make_worker
    return [w for w in SOLVER_POOL if tab.fingerprint(w) not in (None, make_worker(w).fingerprint)]


def stale_cells(tab: OutcomeTable, tasks: RouteTasks) -> int:
    """Cells whose key no longer matches the current query text, prompt and decode settings (a changed task
    generator or prompt would otherwise be replayed silently against the wrong queries)."""
    from agentmill.methods.router.table import cell_key
    from agentmill.methods.router.workers import lm_prompt
    bad = 0
    for w in tab.workers:
        info = tab.header["workers"].get(w) or {}
        fp, decode = info.get("fingerprint"), info.get("decode")
        if fp is None or decode is None:
            continue
        for q in tasks.queries:
            prompt = q.text if w.startswith("solver:") else lm_prompt(q.text)
            for c in tab.cells(q.qid, w):
                bad += int(bool(c.key) and c.key != cell_key(fp, q.qid, prompt, decode, c.replicate))
    return bad


def table_path(which: str) -> Path:
    return shipped_table() if which == "shipped" else Path(which)


def table_reads(s: Any, model: str | None) -> list[Path]:
    """``Experiment.reads``: the committed table (listed even when absent, so committing it counts as a change)."""
    return [] if getattr(s, "table", "shipped") == "standin" else [table_path(s.table)]


def load_pool(table: str, *, extra: Any = None, lm_worker: str = LM_WORKER) -> Pool | str:
    """The pool of the claims (SmolLM2 + five solvers) over RouteTasks seed 0, or the precondition note.
    ``table="standin"`` builds the smoke table (6 queries per template). ``extra(tasks, table, lm_worker)`` may
    return ``(rows, workers)`` of pseudo-workers (workflows) to add as further columns."""
    from agentmill.methods.router.features import NgramFeatures
    if table == "standin":
        tasks = RouteTasks(per_template=6)
        tab = smoke_table(tasks)
        lm_worker, source = STANDIN, "scripted stand-in (smoke)"
    else:
        path = table_path(table)
        if not path.exists():
            return NO_TABLE
        tasks = RouteTasks()
        tab = OutcomeTable.load(path)
        if not tab.complete([q.qid for q in tasks.queries], lm_worker):
            return f"{NO_TABLE} ({path.name} lacks {lm_worker} cells for some queries)"
        missing = [w for w in SOLVER_POOL if not tab.complete([q.qid for q in tasks.queries], w)]
        if missing:
            return f"precondition not met: {path.name} lacks solver cells for {missing}"
        n_stale = stale_cells(tab, tasks)
        if n_stale:
            return f"precondition not met: {n_stale} cells of {path.name} do not match the current queries or prompt"
        stale = stale_solvers(tab)
        if stale:
            return f"precondition not met: {path.name} holds stale solver cells for {stale} (fingerprint changed)"
        source = str(path.relative_to(path.parents[3])) if len(path.parents) > 3 else str(path)
    workers = [lm_worker, *SOLVER_POOL]
    if extra is not None:
        rows, more = extra(tasks, tab, lm_worker)
        tab.add_rows(rows)
        workers += list(more)
    feats = NgramFeatures()
    ids, Y, L, A, X = {}, {}, {}, {}, {}
    for split in ("train", "val", "test"):
        ids[split] = tasks.ids(split)
        Y[split], _, L[split] = tab.matrices(ids[split], workers)
        A[split] = np.array([[tab.answer(q, w) is None for w in workers] for q in ids[split]])
        X[split] = feats.transform([tasks.texts[q] for q in ids[split]])
    return Pool(tasks, tab, workers, ids, Y, L, A, X, source)
