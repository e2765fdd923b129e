"""Smoke profiles of the E179 drafter experiments on the tiny random Llama (no SmolLM2): they run end to end,
write checkpoints that a second run reuses, and render their plots."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


@pytest.fixture()
def art(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTMILL_ARTIFACTS", str(tmp_path / "artifacts"))
    return tmp_path


def _ctx(tmp_path, name):
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path / name)


@pytest.mark.slow
def test_markov_gain_smoke(art):
    exp = get("e179.markov_gain")
    ctx = _ctx(art, "mg")
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["a1_tau_ratio"].value > 0 and m["a1_tau_ratio"].lo <= m["a1_tau_ratio"].hi
    assert (ctx.work_dir / "branch_b" / "model.safetensors").exists()
    again = exp.measure(exp.setups["smoke"], _ctx(art, "mg"))     # checkpoints and evaluations reused
    assert again["a1_tau_ratio"].value == m["a1_tau_ratio"].value
    paths = exp.plots(ctx.data, art)
    assert paths and all(p.stat().st_size > 3000 for p in paths)


@pytest.mark.slow
def test_calibration_smoke(art):
    exp = get("e179.calibration")
    ctx = _ctx(art, "cal")
    m = exp.measure(exp.setups["smoke"], ctx)
    assert 0 <= m["c1_ece_after"].value <= 1 and len(ctx.data["temperatures"]) == 4
    paths = exp.plots(ctx.data, art)
    assert paths and all(p.stat().st_size > 3000 for p in paths)


@pytest.mark.slow
def test_sampling_equality_smoke_and_holm(art):
    from agentmill.experiments.e179_sampling_equality import holm

    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    exp = get("e179.sampling_equality")
    ctx = _ctx(art, "t5")
    m = exp.measure(exp.setups["smoke"], ctx)
    assert 0 <= m["t5_min_holm_p"].value <= 1 and len(ctx.data["holm"]) == 2
    assert exp.plots(ctx.data, art)
