"""The E179 SPS table cache: one profile per (fingerprint, threads, R buckets, grid), shared by the single-user and
load experiments of a run (issue 24: a second profile cost about two minutes of the quick main job)."""

from __future__ import annotations

from types import SimpleNamespace

from agentmill.core.executor import make_executor
from agentmill.experiments.e179_dspark.sps_cache import sps_table
from agentmill.experiments.protocol import RunContext
from agentmill.methods.dspark import costmodel


def test_single_user_default_shares_the_load_sweeps_table(tmp_path, monkeypatch) -> None:
    grids = []

    def fake_profile(step_fn, grid, *, reps, warmup, fingerprint=None):
        grids.append(grid)
        return costmodel.SPSTable(list(grid["B"]), list(grid["R"]), list(grid["ctx"]),
                                  {costmodel.SPSTable.key(r, c): [0.01 * b for b in grid["B"]]
                                   for r in grid["R"] for c in grid["ctx"]})

    monkeypatch.setattr(costmodel.SPSTable, "profile", classmethod(lambda cls, *a, **k: fake_profile(*a, **k)))
    monkeypatch.setattr(costmodel, "engine_step_fn", lambda engine: None)
    engine = SimpleNamespace(fingerprint="fp", engine_config=SimpleNamespace(threads=1))
    ctx = RunContext(profile="quick", model="none", executor=make_executor("serial"), work_dir=tmp_path / "exp")
    single = sps_table(engine, ctx, quick=True)            # the single-user experiment: default R buckets
    load = sps_table(engine, ctx, quick=True, max_r=4)     # the load sweep at quick (C up to 4)
    assert len(grids) == 1 and grids[0]["R"] == [1, 4]     # profiled once, read twice
    assert single.r_buckets == load.r_buckets == [1, 4]
    assert [p.name for p in (tmp_path / "e179.sps").iterdir()] == ["sps-fp-t1-r4-quick.json"]
    sps_table(engine, ctx, quick=True, max_r=1)            # an explicit R = 1 table is still its own
    assert grids[-1]["R"] == [1] and len(grids) == 2
    sps_table(engine, ctx, quick=False)                    # full: the load sweep's R up to 16
    assert grids[-1]["R"] == [1, 4, 16]
