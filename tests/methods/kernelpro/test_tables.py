"""Exhaustive tables: a row's speed is the table's minimum reference time over the candidate's minimum (load only
slows a call down), with the interleaved ratio of medians kept beside it; checked on hand-made timing samples."""

from __future__ import annotations

import math

import pytest

from agentmill.methods.kernelpro import library, tables, wall


def _fake_evaluate_many(samples):
    def fake(task, srcs, **kw):
        out = []
        for (src, flags) in srcs:
            cand, ref = samples[len(fake.seen) % len(samples)]
            fake.seen.append(src)
            ev = wall.Evaluation("correct", wall.WallVerdict(True), cand_samples=list(cand), ref_samples=list(ref))
            ev.t_cand, ev.t_ref = sorted(cand)[len(cand) // 2], sorted(ref)[len(ref) // 2]
            ev.speedup = ev.t_ref / ev.t_cand
            out.append(ev)
        return out
    fake.seen = []
    return fake


def test_table_speed_is_a_ratio_of_minima_with_one_reference_time(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = [([1.0, 5.0, 1.2], [4.0, 4.0, 9.0]),   # median ratio 4/1.2 = 3.33; minima: 2/1 = 2
               ([2.0, 2.0, 2.0], [2.0, 8.0, 8.0]),   # median ratio 8/2 = 4 (a loaded reference); minima: 2/2 = 1
               ([0.5, 3.0, 3.0], [6.0, 6.0, 6.0]),   # median ratio 2; minima: 2/0.5 = 4
               ([4.0, 4.0, 4.0], [2.5, 2.5, 2.5])]   # median ratio 0.625; minima: 2/4 = 0.5
    monkeypatch.setattr(wall, "evaluate_many", _fake_evaluate_many(samples))
    tb = tables.build("sum", "smoke", ceilings=None, cache=False)
    assert len(tb.rows) == library.space_size("sum", "smoke") == 4
    got = sorted((r["speedup"], r["speedup_median"]) for r in tb.rows.values())
    want = sorted([(2.0, 4 / 1.2), (1.0, 4.0), (4.0, 2.0), (0.5, 0.625)])
    for (a, b), (c, d) in zip(got, want):
        assert math.isclose(a, c) and math.isclose(b, d)
    assert tb.meta["t_ref_min"] == 2.0 and tb.optimum() == 4.0
    assert all(len(r["cand_samples"]) == 3 for r in tb.rows.values())


def test_the_k13_space_is_the_quick_sub_space_plus_the_exploit_action() -> None:
    """K-13 merges an honest table and an exploit table measured on one space: its keys must match the k13 space."""
    k13 = library.space("softmax_rows", "k13")
    assert {k: v for k, v in k13.items() if k != "exploit"} == library.space("softmax_rows", "quick")
    assert k13["exploit"][0] == "" and set(k13["exploit"][1:]) <= set(library.EXPLOITS)
    root = library.root("softmax_rows", "k13")
    assert tables.key(root) == tables.key(library.root("softmax_rows", "quick"))


def test_the_reward_cap_is_on_the_rows_scale() -> None:
    """S_cap divides the same reference time as the rows' speeds (the minimum): a candidate at the roof has speed
    t_ref_min / t_min = S_cap, i.e. reward 1 — not the median reference's larger cap."""
    from types import SimpleNamespace

    from agentmill.methods.kernelpro.search import Outcome, reward

    report = SimpleNamespace(t_min=1.0, headroom=6.0)   # the median reference took 6.0, its minimum 3.0
    assert tables.s_cap(3.0, report) == 3.0
    assert tables.s_cap(1.2, report) == 1.5 and tables.s_cap(3.0, None) == 2.0
    assert math.isclose(reward(Outcome(True, 3.0 / 1.0), tables.s_cap(3.0, report)), 1.0)
    assert reward(Outcome(True, 3.0), max(report.headroom, 1.5)) < 0.65   # the old cap: ~0.61 at the roof
