"""Outcome tables: per (query, worker) correctness, cost and latency, recorded once and replayed offline.

The file is JSONL. Row 1 is a header (``type: header``: task set, seed, package versions, and per worker its
fingerprint and decode parameters); then one row per call (``type: cell``) with ``key = sha256(fingerprint ‖
query_id ‖ prompt ‖ decode params ‖ replicate)``, the raw answer, the score, cost and latency. Rows are appended and
fsynced before they are used, so a killed recording resumes at the first missing key. Replaying a worker whose
fingerprint differs from the recorded one is an error (:class:`FingerprintMismatch`), never a silent reuse.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


REPO = Path(__file__).resolve().parents[4]
LM_WORKER = "hf:smollm2"


def shipped_table() -> Path:
    """The committed SmolLM2 + solver outcome table over RouteTasks (seed 0)."""
    return REPO / "assets" / "router" / "smollm2-135m" / "route_tasks.jsonl"


class FingerprintMismatch(ValueError):
    """A worker's current fingerprint differs from the one its cells were recorded with."""


class TableError(ValueError):
    """A malformed outcome table (the message names the row and field)."""


def cell_key(fingerprint: str, query_id: str, prompt: str, decode: Mapping[str, Any], replicate: int = 0) -> str:
    blob = "\x1f".join([fingerprint, query_id, prompt, json.dumps(decode, sort_keys=True), str(replicate)])
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Cell:
    query_id: str
    worker: str
    replicate: int
    answer: str | None
    score: float
    cost: float
    latency: float
    key: str = ""


def _check_cell(row: Mapping[str, Any], where: str) -> Cell:
    try:
        score, cost = float(row["score"]), float(row["cost"])
        latency = float(row.get("latency", cost))
        qid, worker = str(row["query_id"]), str(row["worker"])
    except (KeyError, TypeError, ValueError) as e:
        raise TableError(f"{where}: needs query_id, worker, numeric score and cost ({e})") from e
    if not (0.0 <= score <= 1.0):
        raise TableError(f"{where}: score {score} is outside [0, 1]; rescale scores to [0, 1]")
    for name, v in (("cost", cost), ("latency", latency)):
        if math.isnan(v) or v < 0:
            raise TableError(f"{where}: {name} {v} must be a non-negative number")
    ans = row.get("answer")
    return Cell(qid, worker, int(row.get("replicate", 0)), None if ans is None else str(ans), score, cost, latency,
                str(row.get("key", "")))


class OutcomeTable:
    """Cells indexed by (query id, worker); ``matrices`` gives Y (mean score over replicates), C (mean cost) and L
    (mean latency), each of shape ``(n_queries, n_workers)``."""

    def __init__(self, cells: Iterable[Cell] = (), header: Mapping[str, Any] | None = None) -> None:
        self.header: dict[str, Any] = dict(header or {"type": "header", "workers": {}})
        self.header.setdefault("workers", {})
        self._cells: dict[tuple[str, str], dict[int, Cell]] = {}
        self._keys: dict[str, Cell] = {}
        for c in cells:
            self.add(c)

    def add(self, c: Cell) -> None:
        if c.key:
            old = self._keys.get(c.key)
            if old is not None:
                if (old.answer, old.score) != (c.answer, c.score):
                    raise TableError(f"duplicate key {c.key[:12]}… for ({c.query_id}, {c.worker}) with different "
                                     f"results ({old.answer!r} vs {c.answer!r}); remove one of the rows")
                return
            self._keys[c.key] = c
        self._cells.setdefault((c.query_id, c.worker), {})[c.replicate] = c

    def add_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Add long-format rows (``from_long``'s shape), e.g. the cells of workflow pseudo-workers."""
        for i, r in enumerate(rows):
            self.add(_check_cell(r, f"row {i}"))

    def has_key(self, key: str) -> bool:
        return key in self._keys

    @property
    def workers(self) -> list[str]:
        return sorted({w for _, w in self._cells})

    @property
    def query_ids(self) -> list[str]:
        return sorted({q for q, _ in self._cells})

    def cells(self, query_id: str, worker: str) -> list[Cell]:
        return list(self._cells.get((query_id, worker), {}).values())

    def answer(self, query_id: str, worker: str) -> str | None:
        cs = self.cells(query_id, worker)
        return cs[0].answer if cs else None

    def __len__(self) -> int:
        return sum(len(v) for v in self._cells.values())

    def fingerprint(self, worker: str) -> str | None:
        return (self.header["workers"].get(worker) or {}).get("fingerprint")

    def check_fingerprint(self, worker: str, fingerprint: str) -> None:
        rec = self.fingerprint(worker)
        if rec is not None and rec != fingerprint:
            raise FingerprintMismatch(f"worker {worker!r} was recorded with fingerprint {rec[:40]} but is now "
                                      f"{fingerprint[:40]}: its cells are stale; record them again into a new table")

    def matrices(self, query_ids: Sequence[str], workers: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n, m = len(query_ids), len(workers)
        Y, C, L = np.zeros((n, m)), np.zeros((n, m)), np.zeros((n, m))
        for j, w in enumerate(workers):
            for i, q in enumerate(query_ids):
                cs = self._cells.get((q, w))
                if not cs:
                    raise KeyError(f"no recorded cell for query {q!r} and worker {w!r}; run `agentmill router record`")
                vals = list(cs.values())
                Y[i, j] = sum(c.score for c in vals) / len(vals)
                C[i, j] = sum(c.cost for c in vals) / len(vals)
                L[i, j] = sum(c.latency for c in vals) / len(vals)
        return Y, C, L

    def complete(self, query_ids: Sequence[str], worker: str) -> bool:
        return all((q, worker) in self._cells for q in query_ids)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OutcomeTable:
        path = Path(path)
        header: dict[str, Any] | None = None
        cells = []
        with path.open(encoding="utf-8") as f:
            for ln, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    if ln > 1 and not f.readline():  # a torn last line from a killed recording: ignored
                        break
                    raise TableError(f"{path}:{ln}: not JSON") from None
                if row.get("type") == "header":
                    header = row if header is None else {**header, **row,
                                                         "workers": {**header["workers"], **row.get("workers", {})}}
                elif row.get("type") == "worker":
                    header = header or {"type": "header", "workers": {}}
                    header["workers"][row["worker"]] = {k: v for k, v in row.items() if k not in ("type", "worker")}
                else:
                    cells.append(_check_cell(row, f"{path}:{ln}"))
        return cls(cells, header)

    @classmethod
    def from_long(cls, rows: Iterable[Mapping[str, Any]]) -> OutcomeTable:
        """RouterBench-style long rows ``{query_id, worker, score, cost[, latency, answer, replicate]}``."""
        return cls(_check_cell(r, f"row {i}") for i, r in enumerate(rows))


def _append(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def record_outcomes(tasks: Any, workers: Sequence[Any], out: str | os.PathLike[str], *, replicates: int = 1,
                    resume: bool = True, query_ids: Sequence[str] | None = None, header: Mapping[str, Any] | None
                    = None, progress: Any = None) -> OutcomeTable:
    """Run every worker on every query of ``tasks`` (or ``query_ids``), append a row per call to ``out`` (written
    and fsynced before use) and return the table. With ``resume`` an existing file is read first and only missing
    keys run; a worker whose fingerprint changed raises :class:`FingerprintMismatch`. LM workers with
    ``answer_many`` are called in batches."""
    from agentmill.envs.route_tasks import verify
    out = Path(out)
    if replicates < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates}")
    if out.exists() and not resume:
        raise FileExistsError(f"{out} exists; pass resume=True to continue it or choose a new path")
    table = OutcomeTable.load(out) if out.exists() else OutcomeTable()
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        h = {"type": "header", "tasks": getattr(tasks, "name", "route-tasks"), "seed": getattr(tasks, "seed", None),
             "workers": {}, **(header or {})}
        _append(out, [h])
        table.header = h
    qids = list(query_ids) if query_ids is not None else [q.qid for q in tasks.queries]
    for w in workers:
        decode = dict(getattr(w, "decode", {"solver": True}))
        table.check_fingerprint(w.worker_id, w.fingerprint)
        if table.fingerprint(w.worker_id) is None:
            info = {"fingerprint": w.fingerprint, "decode": decode}
            lm = getattr(w, "lm", None)
            if lm is not None and getattr(lm, "info", None):
                info["lm_info"] = {k: v for k, v in lm.info.items() if k in ("gguf_sha256", "spec", "dtype",
                                                                            "torch", "transformers", "n_params")}
            _append(out, [{"type": "worker", "worker": w.worker_id, **info}])
            table.header["workers"][w.worker_id] = info
        todo = []
        for qid in qids:
            q = tasks.by_id[qid]
            prompt = w.prompt_for(q.text) if hasattr(w, "prompt_for") else q.text
            for r in range(replicates):
                key = cell_key(w.fingerprint, qid, prompt, decode, r)
                if not table.has_key(key):
                    todo.append((q, r, key))
        batch = getattr(w, "batch", 1) if hasattr(w, "answer_many") else 100  # solvers: one fsync per 100 rows
        done = 0
        for i in range(0, len(todo), max(1, batch)):
            chunk = todo[i: i + max(1, batch)]
            if hasattr(w, "answer_many"):
                results = w.answer_many([q.text for q, _, _ in chunk])
            else:
                results = [w.answer(q.text) for q, _, _ in chunk]
            rows = []
            for (q, r, key), res in zip(chunk, results):
                rows.append({"type": "cell", "key": key, "query_id": q.qid, "worker": w.worker_id, "replicate": r,
                             "answer": res.answer, "score": verify(q, res.answer), "cost": round(res.cost, 6),
                             "latency": round(res.latency, 6)})
            _append(out, rows)
            for row in rows:
                table.add(_check_cell(row, str(out)))
            done += len(chunk)
            if progress is not None:
                progress(w.worker_id, done, len(todo))
    return table


ENV_PACKAGES = ("agentmill", "numpy", "scipy", "torch", "transformers", "gguf", "cmaes", "tokenizers")


def environment_versions() -> dict[str, str]:
    """Installed versions of the packages a recorded answer can depend on (for the table header)."""
    import importlib.metadata
    out = {}
    for name in ENV_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out
