"""``e177.kernelpro_search_budget`` on a synthetic table (no timing): shares by budget, the smallest budget, the
noise-aware share, the prefix check and the plot; its claims are reported only, at every profile."""

from __future__ import annotations

import math
import zlib

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext
from agentmill.methods.kernelpro import library, roofline, tables


def _synthetic(task: str, which: str, **kw) -> tables.MeasuredTable:
    """A 48-point table over sum's quick space: one sharp optimum (speed 4) far from the root, a plateau at 2-3."""
    rows = {}
    for p in library.enumerate_space("sum", "quick"):
        d = dict(p)
        h = zlib.crc32(tables.key(p).encode()) % 100
        sp = 4.0 if (d["acc"], d["unroll"], d["opt"], d["fm"]) == (8, 4, "O3", 1) else 2.0 + h / 100
        rows[tables.key(p)] = {"params": d, "status": "correct", "speedup": sp, "kb_allclose": True,
                               "recommended": [], "cand_samples": [1.0, 1.0, 1.0, 1.0, 1.0],
                               "ref_samples": [sp * 0.8, sp * 0.9, sp, sp * 1.1, sp * 1.2]}
    return tables.MeasuredTable("sum", "quick", rows, {"s_cap": 4.0, "code": "synthetic"})


def test_budget_curve_on_a_synthetic_table(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = get("e177.kernelpro_search_budget")
    assert not exp.parallel_safe  # a missing table is measured inside the run
    monkeypatch.setattr(roofline, "calibrate", lambda **kw: None)
    monkeypatch.setattr(tables, "build", _synthetic)
    ctx = RunContext(profile="full", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    s = exp.setup_for("full", {"tasks": "sum", "space": "quick", "seeds": "4", "budgets": "5,10,40,0"})
    m = exp.measure(s, ctx)
    d = ctx.data
    assert d["labels"] == ["5", "10", "40", "space"] and d["budgets_by_task"]["sum"]["space"] == 48
    assert all(c["prefix_equal"] for c in d["prefix_checks"])
    # at the whole space every search that does not stop early has seen the optimum; random always does
    assert m["kb_share_random_bspace"].value == 1.0 and m["kb_share_random_bspace"].method == "wilson"
    for a in ("mcts", "greedy", "random"):
        shares = [m[f"kb_share_{a}_b{lab}"].value for lab in d["labels"]]
        assert shares == sorted(shares)  # a larger budget never loses a run that reached the optimum
        noisy = [m[f"kb_share_noise_{a}_b{lab}"].value for lab in d["labels"]]
        assert all(n >= st for n, st in zip(noisy, shares))
        lab = d["smallest_budget"]["strict"][a]
        v = m[f"kb_budget_{a}_observed"].value
        assert (lab == "never" and math.isnan(v)) or v == d["budgets_by_task"]["sum"][lab]
    # the strict set is the single optimum (others ≤ 2.99 < 3.8); under noise (±20 % ranges) it grows
    assert d["near_optimal_points"]["sum"]["strict"] == 1 and d["near_optimal_points"]["sum"]["noise"] > 1
    assert set(exp.judge("full", m, d).values()) == {"not_judged"}
    assert "reported only" in exp.judge_with_reasons("full", m, d)[1]["E177-KB-mcts"]
    assert [p.name for p in exp.plots(d, tmp_path)] == ["kernelpro_search_budget.png"]


@pytest.mark.slow  # ~2 s: sum's 4-point table (measured once if not cached, as e177.kernelpro_search does) and replays
def test_search_budget_smoke(tmp_path) -> None:
    exp = get("e177.kernelpro_search_budget")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    assert {"kb_share_mcts_b2", "kb_share_greedy_bspace", "kb_budget_random_observed"} <= set(m)
    assert len(exp.plots(ctx.data, tmp_path)) == 1
