"""Smoke runs of the FO-8 (tiny agent organism) and episode-mode experiments, and checks that their judges can fail
and that a failed organism gate withholds every FO-8 verdict."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


@pytest.mark.parametrize("name", [pytest.param("organism", marks=pytest.mark.slow), "episodes"])
def test_registered_smoke_measure_and_plots(name: str, tmp_path) -> None:
    from agentmill.experiments.e174_forensics import MODULES

    assert name in MODULES
    exp = get(f"e174.forensics_{name}")
    assert exp.parallel_safe and exp.quick_budget_s is not None and exp.quick_budget_s <= 10
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m and all(isinstance(v, Estimate) for v in m.values())
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    assert len(ctx.data["prereg_sha256"]) == 64
    if exp.plots is not None:
        paths = exp.plots(ctx.data, tmp_path)
        assert paths and all(p.exists() for p in paths)
    if name == "organism":  # gates measured and recorded; the substrate named in the data and every claim row
        assert set(ctx.data["gates"]) == {"valid", "consistent", "cell_dev"} and "gate_cell_dev" in m
        assert "tiny:tiny-agent" in ctx.data["substrate"]


def test_organism_rows_name_the_substrate() -> None:
    exp = get("e174.forensics_organism")
    assert all("tiny agent organism" in c.statement for c in exp.claims)
    for prof in ("smoke", "quick", "full"):
        assert exp.setups[prof].organism == "tiny:tiny-agent" and exp.setups[prof].smollm2_organism == "not built"


def test_organism_claims_can_fail_and_failed_gates_withhold() -> None:
    exp = get("e174.forensics_organism")
    v = exp.judge("full", {"organism_d50": Estimate(80.0, 70.0, 95.0, n=960, method="b"),
                           "organism_conceal_rr": Estimate(1.2, 0.8, 1.9, n=240, method="katz"),
                           "organism_decoys_supported": Estimate.exact(1.0, n=4)})
    assert v == {"FO-8-d50": "not_supported", "FO-8-rr": "not_supported", "FO-8-decoys": "not_supported"}
    gated = exp.judge("full", {"gate_valid": Estimate.exact(0.5)},
                      {"precondition": "precondition not met: the tiny agent organism failed its gates"})
    assert set(gated.values()) == {"inconclusive"}


def test_episode_claims_can_fail() -> None:
    exp = get("e174.forensics_episodes")
    v = exp.judge("quick", {"episode_replay_identical": Estimate.exact(0.99, n=286),
                            "episode_checks_passed": Estimate.exact(13 / 14, n=14)})
    assert v == {"FO-6e-identity": "not_supported", "FO-6e-checks": "not_supported"}
