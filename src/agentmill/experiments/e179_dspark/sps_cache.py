"""The engine's profiled SPS(B) table (steps per second against batch size), cached per engine fingerprint.

Profiling takes a minute or more; the single-user, sampling-equality and load experiments share one table per
(engine fingerprint, threads, max draft rows, grid), kept beside their work dirs in ``e179.sps/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentmill.experiments.protocol import RunContext


def _r_buckets(quick: bool, max_r: int | None) -> list[int]:
    return [r for r in (1, 4, 16) if r <= (max_r or (4 if quick else 16))]


def sps_table_path(engine: Any, ctx: RunContext, *, quick: bool, max_r: int | None = None, tag: str = "") -> Path:
    """Where :func:`sps_table` keeps the table for these arguments (``e179.server`` hands it to the server it
    starts, so the server does not profile a table of its own)."""
    rs = _r_buckets(quick, max_r)
    return ctx.work_dir.parent / "e179.sps" / (f"sps-{engine.fingerprint}-t{engine.engine_config.threads}"
                                               f"-r{rs[-1]}{'-quick' if quick else ''}{tag}.json").replace(":", "_")


def sps_table(engine: Any, ctx: RunContext, *, quick: bool, max_r: int | None = None, tag: str = "") -> Any:
    """The engine's SPS(B) table (profiled once per fingerprint and thread count, cached in the work dir).

    ``max_r``: the most requests a step of the caller holds; the table gets the R buckets 1, 4, 16 up to it. The
    default (None) is the load sweep's at that profile (4 quick, 16 full): a single-user caller reads only the R = 1
    rows, which are profiled the same way in either table, so it shares the load sweep's table instead of costing a
    second profile (about two minutes at quick on a 2-core AMD EPYC; issue 24)."""
    from agentmill.methods.dspark.costmodel import SPSTable, engine_step_fn

    rs = _r_buckets(quick, max_r)
    path = sps_table_path(engine, ctx, quick=quick, max_r=max_r, tag=tag)
    if path.exists():
        return SPSTable.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ctx.progress("profiling SPS(B)", 0, None)
    bs = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64, 128] if quick else \
        list(range(1, 17)) + [20, 24, 32, 40, 48, 64, 96, 128]
    grid = {"B": bs, "R": rs, "ctx": [128, 512] if quick else [128, 512, 1024]}
    table = SPSTable.profile(engine_step_fn(engine), grid, reps=3 if quick else 7, warmup=1 if quick else 2)
    table.save(path)
    return table
