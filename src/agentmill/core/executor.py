"""One small interface to run independent work units: serially, in a process pool, or on Ray.

Units must be pure functions of their arguments (seeds travel inside the arguments, see ``core.seeding``), so
the three engines return identical results in the input order. Results are yielded as units finish through
``on_result`` so callers can checkpoint and show progress.
"""

from __future__ import annotations

import os
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


class ProcessExecutor:
    """``concurrent.futures`` process pool (spawn context: safe with torch and threads)."""

    name = "process"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, (os.cpu_count() or 1))

    def map(self, fn, items, on_result=None):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        out: list[Any] = [None] * len(items)
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn")) as pool:
            futs = {pool.submit(fn, x): i for i, x in enumerate(items)}
            for fut in as_completed(futs):
                i = futs[fut]
                out[i] = fut.result()
                if on_result is not None:
                    on_result(i, out[i])
        return out


class RayExecutor:
    """Ray tasks. Starts a local Ray runtime if none is connected (``address=None``), or joins ``address``."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError as e:  # pragma: no cover - exercised only without the extra
            raise ImportError("the Ray executor needs Ray: pip install 'agentmill[ray]'") from e
        self._ray = ray
        if not ray.is_initialized():
            kw: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False}
            if address:
                kw["address"] = address
            else:
                kw["num_cpus"] = num_cpus or (os.cpu_count() or 1)
            ray.init(**kw)

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
