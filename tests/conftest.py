"""Shared pytest setup: the repo root on sys.path (so ``tests.helpers`` imports under importlib mode), offline HF."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers on two cores: one compute thread each (torch reads these at its first parallel region). With
    # torch's default of one thread per core in both, the OpenMP threads oversubscribe the cores and spin: the E164
    # organism smoke tests took 386 s instead of about 40 s.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    # The same for the models that set their own thread count (the transformers backend defaults to 2, the engine
    # takes its config's): capped to one, as in the main job's pool workers (core/machine.py). SmolLM2's 64-step
    # greedy check against transformers took 225 s of a CI run with two threads per worker.
    os.environ.setdefault("AGENTMILL_THREAD_CAP", "1")


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist (``make test`` runs two workers), tests that start a Ray runtime share one worker: a
    ``ray.init()`` without an address joins the newest cluster on the machine, so two at once would meet."""
    import pytest

    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
    if getattr(config.option, "loadgroup", False):
        _suffix_xdist_groups(items)


def _suffix_xdist_groups(items) -> None:
    """Give each ``xdist_group`` test the ``@group`` node-id suffix that ``--dist loadgroup`` schedules by.

    pytest-xdist 3.8 adds the suffix by assigning ``item._nodeid``, which pytest 9 no longer reads (the id lives in
    ``item._id``), so every group was silently split over both workers: the Ray tests met, and the Qwen model loaded
    once per worker (80–100 s each under CI's load). Done here the same way on both workers, so their collections
    still agree; a suffix already present (a fixed xdist) is left alone."""
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names or "@" in item.nodeid.rpartition("]")[2]:
            continue
        nodeid = f"{item.nodeid}@{'_'.join(names)}"
        if hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(nodeid)
        else:
            item._nodeid = nodeid
