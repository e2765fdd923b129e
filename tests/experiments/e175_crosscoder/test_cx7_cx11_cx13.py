"""CX-7, CX-11 and CX-13: registered, plan-only at quick, smoke runs end to end, judges can fail."""

from __future__ import annotations

import dataclasses

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

NAMES = ("single_vs_many", "excl_penalty", "layers")


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_quick_is_plan_only(name, tmp_path) -> None:
    from agentmill.experiments.e175_crosscoder import MODULES

    assert name in MODULES
    exp = get(f"e175.crosscoder_{name}")
    ctx = _ctx(tmp_path, "quick")
    assert exp.measure(exp.setups["quick"], ctx) == {}
    assert "tiny_tool_pair" in ctx.data["plan_only"]
    assert set(exp.judge("quick", {}, ctx.data).values()) <= {"not_judged"}


def test_cx7_is_a_two_sided_equivalence_on_a_90_percent_interval() -> None:
    exp = get("e175.crosscoder_single_vs_many")
    (c,) = exp.claims
    assert c.judge(Estimate(0.02, -0.06, 0.09, n=100, method="bootstrap")) == "supported"
    assert c.judge(Estimate(0.02, -0.12, 0.09, n=100, method="bootstrap")) != "supported"
    assert c.judge(Estimate(-0.30, -0.40, -0.20, n=100, method="bootstrap")) == "not_supported"


def test_cx11_needs_five_points_and_a_positive_interval() -> None:
    (c,) = get("e175.crosscoder_excl_penalty").claims
    assert c.judge(Estimate(0.08, 0.01, 0.15, n=200, method="bootstrap")) == "supported"
    assert c.judge(Estimate(0.08, -0.01, 0.15, n=200, method="bootstrap")) != "supported"
    assert c.judge(Estimate(0.00, -0.05, 0.04, n=200, method="bootstrap")) == "not_supported"


def test_cx13_is_exploratory_and_never_judged() -> None:
    from agentmill.core.stats import Estimate

    exp = get("e175.crosscoder_layers")
    assert [c.id for c in exp.claims] == ["CX-13"]
    data: dict = {}
    from agentmill.experiments.e175_crosscoder.layers import EXPLORATORY
    from agentmill.experiments.protocol import unjudged

    out = unjudged({"cx13_best_gain_max": Estimate(0.5, 0.4, 0.6, n=100)}, ["cx13_best_gain_max"], EXPLORATORY, data)
    assert exp.judge("full", out, data) == {"CX-13": "not_judged"}


def test_failed_gates_make_the_new_claims_precondition_not_met(tmp_path) -> None:
    data = {"precondition": "precondition not met: tiny tool pair failed its gates (…)"}
    for name in ("single_vs_many", "excl_penalty"):
        assert set(get(f"e175.crosscoder_{name}").judge("full", {}, data).values()) == {"inconclusive"}


@pytest.mark.slow  # ~10–20 s each on a loaded machine: a 10-step tiny pair, crosscoders and greedy decoding
@pytest.mark.parametrize("name", NAMES)
def test_smoke_runs_measure_and_plots(name, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    exp = get(f"e175.crosscoder_{name}")
    setup = exp.setups["smoke"]
    if name == "layers":
        setup = dataclasses.replace(setup, layers=(1,))
    ctx = _ctx(tmp_path)
    m = exp.measure(setup, ctx)
    assert ctx.data["substrate"].startswith("tiny_tool_pair") and "gates" in ctx.data
    assert m, "smoke runs the measurement even when the 10-step pair fails its gates"
    assert set(exp.judge("smoke", m, ctx.data).values()) <= {"not_judged"}
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def _gates(**kw) -> dict:
    g = {"sibling_strict_format": 0.95, "sibling_tool_exact": 0.70, "base_strict_format": 0.0,
         "sibling_generic_tag_rate": 0.0, "n_tool": 200, "n_generic": 100, "decoy_tag_rate": 0.5, "n_decoy": 100,
         "bare_tag_rate": 0.0, "n_bare": 100, "passed": True}
    return g | kw


def test_smollm2_gate_metrics_and_judge_from_a_hand_made_card(tmp_path) -> None:
    from agentmill.experiments.e175_crosscoder.organism_gate_smollm2 import metrics_from_gates

    exp = get("e175.crosscoder_organism_gate_smollm2")
    m = metrics_from_gates(_gates())
    assert m["cx4_gates_passed_share"].value == 1.0 and m["sibling_decoy_tag_rate"].value == 0.5
    lo, hi = m["sibling_tool_exact"].lo, m["sibling_tool_exact"].hi
    assert lo < 0.70 < hi  # Clopper–Pearson on 140/200
    assert exp.judge("full", m)["CX-4-smollm2"] == "supported"
    failed = metrics_from_gates(_gates(sibling_tool_exact=0.59, sibling_generic_tag_rate=0.5))
    assert failed["cx4_gates_passed_share"].value == 0.5
    assert exp.judge("full", failed)["CX-4-smollm2"] == "not_supported"
    assert len(exp.plots({"gates": _gates()}, tmp_path)) == 1


def test_smollm2_gate_smoke_and_quick_load_no_model(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    exp = get("e175.crosscoder_organism_gate_smollm2")
    for profile in ("smoke", "quick"):
        ctx = _ctx(tmp_path, profile)
        assert exp.measure(exp.setups[profile], ctx) == {} and "no model load" in ctx.data["plan_only"]
        assert exp.plots(ctx.data, tmp_path) == []


def test_tool_pair_records_name_the_smollm2_gates_once_recorded(tmp_path, monkeypatch) -> None:
    import json

    from agentmill.experiments.e175_crosscoder.pairbench import SMOLLM2_NOTE, smollm2_note
    from agentmill.methods.crosscoder import sibling as S

    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    assert smollm2_note() == SMOLLM2_NOTE
    d = S.root_dir() / "tool_sibling-0123456789abcdef"
    d.mkdir(parents=True)
    card = {"training": {"recipe": json.loads(json.dumps(dataclasses.asdict(S.SiblingConfig())))},
            "gates": {"test-200-0-64": _gates(sibling_tool_exact=0.5, passed=False)}}
    (d / "organism_card.json").write_text(json.dumps(card))
    note = smollm2_note()
    assert note.startswith("precondition not met on SmolLM2") and "tool_exact 0.50" in note and "FAILED" in note
    card["gates"]["test-200-0-64"] = _gates()
    (d / "organism_card.json").write_text(json.dumps(card))
    assert "gates passed" in smollm2_note()
