"""One small interface to run independent work units: serially, in a process pool, or on Ray.

Units must be pure functions of their arguments (seeds travel inside the arguments, see ``core.seeding``), so
the three engines return identical results in the input order. Results are yielded as units finish through
``on_result`` so callers can checkpoint and show progress.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("serial", "process", "ray")


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[T], R], items: Sequence[T],
            on_result: Callable[[int, R], None] | None = None) -> list[R]:
        """Apply ``fn`` to every item; return results in input order; call ``on_result(i, r)`` as each finishes."""
        ...


class SerialExecutor:
    name = "serial"

    def map(self, fn, items, on_result=None):
        out = []
        for i, x in enumerate(items):
            r = fn(x)
            if on_result is not None:
                on_result(i, r)
            out.append(r)
        return out


PR_SET_PDEATHSIG = 1
"""``prctl`` option from ``<linux/prctl.h>``: the signal this process gets when its parent thread exits."""


def preexec_die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that makes the child get SIGKILL when the thread that started it
    dies (Linux ``PR_SET_PDEATHSIG``); None elsewhere. For long-lived children such as model servers: a ``finally``
    stops them on every exception and on Ctrl-C, but a ``kill -9`` of the parent runs no cleanup, and a SmolLM2 server
    holds ~1.5 GB. ``prctl`` is looked up here, in the parent, so the child only makes the call between fork and
    exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None
    kill = int(signal.SIGKILL)
    return lambda: prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)


def die_with_parent(parent_pid: int, poll_seconds: float = 1.0) -> None:
    """Make this worker process end when ``parent_pid`` (the process that started it) does; call it first thing in
    a pool worker (``initializer``).

    A ``kill -9`` of the parent runs no cleanup, and spawned pool workers hold both ends of their task queue, so
    they would never see it close: they finish the tasks already queued (writing records for a run the user
    stopped), then wait forever holding their memory, and keep the multiprocessing resource tracker alive with
    them. On Linux the kernel sends SIGKILL when the parent dies (``PR_SET_PDEATHSIG``); a parent that died
    before that call is caught by comparing ``os.getppid()``; and a daemon thread re-checks ``os.getppid()``
    every ``poll_seconds`` on every platform (macOS has no PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - a libc without prctl: the poll below still works
            pass
    if os.getppid() != parent_pid:  # the parent died between our spawn and the prctl call
        os._exit(1)

    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="agentmill-die-with-parent", daemon=True).start()


class ProcessExecutor:
    """``concurrent.futures`` process pool (spawn context: safe with torch and threads); workers die with this
    process (:func:`die_with_parent`)."""

    name = "process"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, (os.cpu_count() or 1))

    def map(self, fn, items, on_result=None):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        out: list[Any] = [None] * len(items)
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                 initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            futs = {pool.submit(fn, x): i for i, x in enumerate(items)}
            for fut in as_completed(futs):
                i = futs[fut]
                out[i] = fut.result()
                if on_result is not None:
                    on_result(i, out[i])
        return out


class RayExecutor:
    """Ray tasks: joins the cluster at ``address`` (or ``$RAY_ADDRESS``, as Ray's own tools do), else starts a
    local Ray runtime with ``num_cpus`` (default: every CPU here).

    A cluster brings its own resources, and ``ray.init`` refuses ``num_cpus`` when joining one, so ``num_cpus``
    applies to a local runtime only and is an error together with an address. ``address="local"`` is Ray's name
    for a new local runtime and takes ``num_cpus``. ``address`` holds the cluster joined (``None``: local)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - exercised only without the extra
            raise ImportError("the Ray executor needs Ray: pip install 'agentmill[ray]'") from e
        self._ray = ray
        address = (address or os.environ.get("RAY_ADDRESS") or "").strip() or None
        joins = address is not None and address != "local"
        if joins and num_cpus is not None:
            raise ValueError(f"num_cpus={num_cpus} applies to a local Ray runtime; the cluster at {address} "
                             f"brings its own CPUs (unset RAY_ADDRESS to start a local one)")
        self.address = address if joins else None
        if not ray.is_initialized():
            kw: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False}
            if address is not None:
                kw["address"] = address
            if not joins:
                kw["num_cpus"] = num_cpus or (os.cpu_count() or 1)
            try:
                ray.init(**kw)
            except ConnectionError as e:
                if not joins:
                    raise
                # Ray joins an explicit address without token authentication unless told (RAY_AUTH_MODE=token),
                # so a cluster that has it refuses us with a long chained error; say it in one line.
                raise ConnectionError(f"cannot join the Ray cluster at {address}: {str(e).splitlines()[0]} (a "
                                      f"cluster with token authentication also needs RAY_AUTH_MODE=token and "
                                      f"its token)") from e

    def map(self, fn, items, on_result=None):
        ray = self._ray
        remote = ray.remote(fn)
        refs = [remote.remote(x) for x in items]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(items)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = index[ref]
                out[i] = ray.get(ref)
                if on_result is not None:
                    on_result(i, out[i])
        return out


def make_executor(name: str = "serial", **kw: Any) -> Executor:
    """``serial`` (default), ``process`` (local pool) or ``ray``."""
    if name == "serial":
        return SerialExecutor()
    if name == "process":
        return ProcessExecutor(**kw)
    if name == "ray":
        return RayExecutor(**kw)
    raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(ENGINES)}")


def iter_chunks(items: Iterable[T], size: int) -> Iterable[list[T]]:
    """Consecutive chunks of ``size`` items (the last may be shorter)."""
    buf: list[T] = []
    for x in items:
        buf.append(x)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf
