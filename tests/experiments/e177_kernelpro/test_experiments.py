"""Smoke runs of every E177 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def _smoke(exp_id: str, tmp_path) -> tuple:
    exp = get(exp_id)
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    assert len(exp.plots(ctx.data, tmp_path)) >= 1
    return exp, m, ctx


def test_registered_and_flags() -> None:
    from agentmill.experiments.e177_kernelpro import MODULES

    assert set(MODULES) == {"roofline", "tools", "wall", "search", "live", "llm", "cuda_static", "perf",
                            "search_budget"}
    assert not get("e177.kernelpro_perf").parallel_safe and get("e177.kernelpro_cuda_static").parallel_safe


def test_tools_smoke_and_judge(tmp_path) -> None:
    exp, m, ctx = _smoke("e177.kernelpro_tools", tmp_path)
    assert m["k3_positive_share"].value == 1.0 and m["k3_negative_share"].value == 1.0
    bad = dict(m, k3_positive_share=Estimate.exact(14 / 15, n=15))
    assert exp.judge("full", bad)["E177-K3-pos"] == "not_supported"


@pytest.mark.slow  # ~6 s: a 4-point table (cached after the first run) and replays
def test_search_smoke(tmp_path) -> None:
    exp, m, ctx = _smoke("e177.kernelpro_search", tmp_path)
    assert {"k6_share_mcts_minus_greedy", "k6_wilcoxon_p", "k8_wilcoxon_p", "k4_recall"} <= set(m)
    assert exp.judge("full", dict(m, k6_wilcoxon_p=Estimate.exact(0.2, n=80)))["E177-K6-wilcoxon"] == "not_supported"


@pytest.mark.slow  # ~6 s: two exploits and one honest variant in the sandbox, negative controls
def test_wall_smoke(tmp_path) -> None:
    exp, m, ctx = _smoke("e177.kernelpro_wall", tmp_path)
    assert m["k5_exploits_caught"].value == 1.0 and m["k5_controls_ok"].value == 1.0
    assert exp.judge("full", dict(m, k5_exploits_caught=Estimate.exact(0.9, n=30)))["E177-K5-exploits"] == \
        "not_supported"


@pytest.mark.slow  # ~8 s: a smoke calibration (one process) and the rulers
def test_roofline_smoke(tmp_path) -> None:
    exp, m, ctx = _smoke("e177.kernelpro_roofline", tmp_path)
    assert m["peak_gflops"].value > 1 and ctx.data["cpu"]
    assert exp.judge("full", dict(m, k1_max_spread=Estimate.exact(0.2, n=3)))["E177-K1-spread"] == "not_supported"


@pytest.mark.slow  # ~5 s: interleaved timings in sandboxed children and fresh compiles
def test_perf_smoke(tmp_path) -> None:
    exp, m, ctx = _smoke("e177.kernelpro_perf", tmp_path)
    assert m["kp4_compile_s"].value > 0 and m["kp5_bookkeeping_share"].value < 0.5


@pytest.mark.slow  # ~6 s: the scripted stub drives 2 LLM proposals through compile and wall
def test_llm_smoke_records_precondition(tmp_path) -> None:
    exp = get("e177.kernelpro_llm")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert ctx.data["precondition"].startswith("precondition not met")
    assert ctx.data["stub"]["outcomes"][:2] == ["correct", "compile_error"]
    v = exp.judge("full", m, ctx.data)
    assert set(v.values()) == {"inconclusive"}


@pytest.mark.slow  # ~5 s: one live search of two evaluations and the re-measurement
def test_live_smoke(tmp_path) -> None:
    exp, m, ctx = _smoke("e177.kernelpro_live", tmp_path)
    assert "k12_remeasured_over_search" in m


@pytest.mark.slow  # ~5 s: nvcc compiles one fixture when it is installed
def test_cuda_static_occupancy_part(tmp_path) -> None:
    exp = get("e177.kernelpro_cuda_static")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["k14_occupancy_share"].value == 1.0
    assert "k14_class_share" in m or ctx.data["precondition"].startswith("precondition not met")
    assert len(exp.plots(ctx.data, tmp_path)) == 1
