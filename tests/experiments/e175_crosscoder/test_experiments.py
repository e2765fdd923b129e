"""Smoke runs of every E175 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered_and_quick_is_plan_only_for_the_tool_pair(tmp_path) -> None:
    from agentmill.experiments.e175_crosscoder import MODULES

    assert {"partition_algebra", "toy_recovery", "toy_leak", "organism_gate", "steering"} <= set(MODULES)
    exp = get("e175.crosscoder_routing")
    ctx = _ctx(tmp_path, "quick")
    assert exp.measure(exp.setups["quick"], ctx) == {}
    assert "tiny_tool_pair" in ctx.data["plan_only"] and "SmolLM2" in ctx.data["plan_only"]
    assert set(exp.judge("quick", {}, ctx.data).values()) == {"not_judged"}


def test_partition_algebra_smoke_and_judge(tmp_path) -> None:
    exp = get("e175.crosscoder_partition_algebra")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["cx1_max_abs_delta_b"].value == 0.0 and m["cx1_postselection_delta_a"].value > 0
    assert m["d3_identity_delta"].value == 0.0 and m["d2_supports_identical"].value == 1.0
    assert exp.judge("full", m)["CX-1-zero"] == "supported"
    assert exp.judge("full", dict(m, cx1_max_abs_delta_b=Estimate.exact(1e-9, n=5)))["CX-1-zero"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow  # ~6 s: two toy crosscoders and five probes
def test_toy_leak_and_recovery_smoke(tmp_path) -> None:
    leak = get("e175.crosscoder_toy_leak")
    ctx = _ctx(tmp_path)
    m = leak.measure(leak.setups["smoke"], ctx)
    assert {"cx3_auroc_joint_cc", "cx3_auroc_self_only_worst", "cx3_auroc_h_b"} <= set(m)
    assert 0.4 < m["cx3_auroc_h_b"].value < 0.6 and ctx.data["table"]["h_a"] > 0.95
    assert len(leak.plots(ctx.data, tmp_path)) == 1
    claim = next(c for c in leak.claims if c.id == "CX-3-joint-CC")
    assert claim.judge(Estimate(0.55, 0.52, 0.58, n=100, method="bootstrap")) == "not_supported"
    rec = get("e175.crosscoder_toy_recovery")
    ctx2 = _ctx(tmp_path)
    m2 = rec.measure(rec.setups["smoke"], ctx2)
    assert "cx2_nu_r_flag_share_observed" in m2  # one seed: the 5-seed rule is withheld
    assert len(rec.plots(ctx2.data, tmp_path)) == 1


@pytest.mark.slow  # ~10 s each: a 20-step tiny pair, crosscoders and greedy decoding
@pytest.mark.parametrize("name", ["organism_gate", "routing", "steering", "spillover_leak", "ablation",
                                  "template_detector"])
def test_tool_pair_experiments_smoke(name, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    exp = get(f"e175.crosscoder_{name}")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert ctx.data["substrate"].startswith("tiny_tool_pair") and "gates" in ctx.data
    assert m, "smoke runs the measurement even when the 20-step pair fails its gates"
    assert set(exp.judge("smoke", m, ctx.data).values()) == {"not_judged"}
    exp.plots(ctx.data, tmp_path)


def test_failed_gates_make_tool_pair_claims_inconclusive(tmp_path) -> None:
    exp = get("e175.crosscoder_routing")
    data = {"precondition": "precondition not met: tiny tool pair failed its gates (…)"}
    assert set(exp.judge("full", {}, data).values()) == {"inconclusive"}
