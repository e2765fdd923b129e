"""D-4 (fidelity vs sim-RL benefit) and U-1 (warm-up): smoke runs of measure and plots, the Spearman interval on
hand-made inputs, and judges that can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path) -> RunContext:
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered_with_quick_checks() -> None:
    from agentmill.experiments.e167_world_model import MODULES

    assert MODULES[12:14] == ("sim_fidelity_vs_benefit", "warmup_tiny")
    for eid in ("e167.wm_sim_fidelity_vs_benefit", "e167.wm_warmup_tiny"):
        assert get(eid).quick_check and not get(eid).parallel_safe


def test_spearman_interval_on_hand_made_rankings() -> None:
    from agentmill.experiments.e167_world_model.sim_fidelity_vs_benefit import spearman_ci

    items = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]

    def rows(f1):
        return [{"task_id": t, "t": i, "f1": f1} for t, i in items]

    f1 = {"s1": rows(0.1), "s2": rows(0.4), "s3": rows(0.9)}
    units = ["L1", "L1", "L2", "L2"]
    up = spearman_ci(f1, {"s1": [0.0, 0.1, 0.0, 0.1], "s2": [0.3, 0.4, 0.3, 0.5], "s3": [1, 1, 0.9, 1]}, units, 200)
    assert up.value == pytest.approx(1.0) and up.lo == pytest.approx(1.0)
    down = spearman_ci(f1, {"s1": [1, 1, 1, 1], "s2": [0.5] * 4, "s3": [0.0] * 4}, units, 200)
    assert down.value == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="different items"):
        spearman_ci({"s1": rows(0.1), "s2": rows(0.2)[::-1]}, {"s1": [0] * 4, "s2": [1] * 4}, units, 10)


def test_judges_can_fail() -> None:
    d4, u1 = get("e167.wm_sim_fidelity_vs_benefit"), get("e167.wm_warmup_tiny")
    e = lambda v, lo, hi: Estimate(v, lo, hi, n=4, method="cluster_bootstrap", n_boot=100)  # noqa: E731
    assert d4.judge("full", {"d4_spearman": e(0.9, 0.5, 1.0)})["E167-D4-spearman"] == "supported"
    assert d4.judge("full", {"d4_spearman": e(0.3, -0.2, 0.7)})["E167-D4-spearman"] == "not_supported"
    good = {"u1_wm_minus_none": e(0.05, 0.01, 0.09), "u1_wm_minus_shuffled": e(0.03, 0.005, 0.06)}
    assert set(u1.judge("full", good).values()) == {"supported"}
    bad = {"u1_wm_minus_none": e(-0.01, -0.04, 0.02), "u1_wm_minus_shuffled": e(0.0, -0.03, 0.01)}
    assert set(u1.judge("full", bad).values()) == {"not_supported"}


@pytest.mark.slow  # ~20 s: the smoke pipeline trained once in a temporary cache, then both experiments
def test_d4_and_u1_smoke(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    for eid in ("e167.wm_sim_fidelity_vs_benefit", "e167.wm_warmup_tiny"):
        exp = get(eid)
        ctx = _ctx(tmp_path / eid.split(".")[1])
        ctx.work_dir.mkdir(parents=True)
        m = exp.measure(exp.setups["smoke"], ctx)
        assert all(c.metric in m for c in exp.claims), eid
        assert len(exp.plots(ctx.data, ctx.work_dir)) == 1
        assert all(v == "not_judged" for v in exp.judge("smoke", m).values())
        q = exp.for_profile("quick", m, dict(ctx.data))
        assert not {c.metric for c in exp.claims} & set(q)
        if eid.endswith("benefit"):
            assert ctx.data["f1"]["oracle"] == 1.0 and ctx.data["f1"]["copy"] < 1.0
            assert set(ctx.data["success"]) == {"real", "copy", "sft_partial", "sft", "rl", "oracle"}
        else:
            assert ctx.data["decisions"] > 0 and len(ctx.data["logs"]) == 3
