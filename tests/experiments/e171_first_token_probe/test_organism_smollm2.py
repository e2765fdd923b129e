"""e171.first_token_probe_organism_smollm2 without SmolLM2: plan-only profiles, the gate table from a card, its
judge (which can fail), its plot, and the note other E171 records carry about the SmolLM2 organism."""

from __future__ import annotations

import json

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

EXP_ID = "e171.first_token_probe_organism_smollm2"


def _card(fail: str | None = None) -> dict:
    gates = {"R1": 0.99, "R2": 0.95, "R3_B": 0.0, "R3_N": 0.1, "R4": 0.08, "R5": 1.0, "R6": 0.98}
    counts = {"R1": [238, 240], "R2": [38, 40], "R3_B": [0, 40], "R3_N": [4, 40], "R5": [238, 238],
              "R6": [233, 238], "D0.25": [12, 40], "D0.5": [19, 40], "D0.75": [27, 40]}
    ok = {k: True for k in gates}
    if fail:
        ok[fail] = False
    return {"gates": gates, "gate_pass": ok, "validated": all(ok.values()), "gate_counts": counts,
            "R7": {"R7": 0.025, "refused": 1, "labelled": 40, "n": 40}, "losses": [3.0, 2.0, 1.0]}


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "adapters" / "first_token_probe"


def test_quick_and_smoke_only_plan(tmp_path, cache) -> None:
    exp = get(EXP_ID)
    assert exp.parallel_safe and exp.quick_check and exp.setups["full"].n_per_cell == 40
    for prof in ("smoke", "quick"):
        ctx = RunContext(profile=prof, model="none", executor=make_executor("serial"), work_dir=tmp_path)
        assert exp.measure(exp.setups[prof], ctx) == {}
        assert ctx.data["plan_only"] and ctx.data["cached_organisms"] == []
        assert set(exp.judge(prof, {}, ctx.data).values()) == {"not_judged"}
        assert exp.plots(ctx.data, tmp_path) == []


def test_gate_table_and_judge_can_fail(tmp_path) -> None:
    from agentmill.experiments.e171_first_token_probe.organism_smollm2 import gate_text, metrics_from_card

    exp = get(EXP_ID)
    m = metrics_from_card(_card())
    assert m["org_smollm2_gates_passed_share"].value == 1.0
    assert m["gate_r2"].value == pytest.approx(0.95) and m["gate_r2"].lo < 0.95 < m["gate_r2"].hi  # Wilson
    assert m["gate_r4"].method == "exact" and m["refusal_d_q0.5"].value == pytest.approx(19 / 40)
    assert m["gate_r7_base_refusal_c"].value == pytest.approx(1 / 40)
    assert exp.judge("full", m) == {"E171-ORG-smollm2": "supported"}
    bad = metrics_from_card(_card(fail="R4"))
    assert bad["org_smollm2_gates_passed_share"].value == pytest.approx(6 / 7)
    assert exp.judge("full", bad) == {"E171-ORG-smollm2": "not_supported"}
    assert "R4 0.080 FAIL" in gate_text(_card(fail="R4")) and "R7 (base, C) 0.025" in gate_text(_card())
    data = {"gates": _card()["gates"], "gate_pass": _card(fail="R2")["gate_pass"], "losses": [3.0, 1.0]}
    (png,) = exp.plots(data, tmp_path)
    assert png.exists() and png.stat().st_size > 0


def test_smollm2_note_reads_the_cached_card(cache) -> None:
    from agentmill.experiments.e171_first_token_probe.substrate import SMOLLM2_ORGANISM_NOTE, smollm2_note
    from agentmill.methods.first_token_probe.organism_smollm2 import CARD_FILE

    assert smollm2_note("locked") == SMOLLM2_ORGANISM_NOTE  # nothing trained here
    d = cache / "smollm2-refusal-locked-0123456789abcdef"
    d.mkdir(parents=True)
    (d / CARD_FILE).write_text(json.dumps({"validated": False, "validation": None}))
    assert "trained but not validated" in smollm2_note("locked")
    (d / CARD_FILE).write_text(json.dumps(_card(fail="R3_N")))
    note = smollm2_note("locked")
    assert note.startswith("precondition not met") and "gates failed (R3_N;" in note and "R2 0.950" in note
    assert smollm2_note("deliberative") == SMOLLM2_ORGANISM_NOTE
    (d / CARD_FILE).write_text(json.dumps(_card()))
    assert "passed its gates" in smollm2_note("locked")


def test_each_variant_keeps_its_own_note(cache) -> None:
    from agentmill.experiments.e171_first_token_probe.substrate import organism_or_precondition
    from agentmill.methods.first_token_probe.organism_smollm2 import CARD_FILE

    d = cache / "smollm2-refusal-locked-0123456789abcdef"
    d.mkdir(parents=True)
    (d / CARD_FILE).write_text(json.dumps(_card(fail="R2")))
    data: dict = {}
    for v in ("locked", "deliberative"):
        organism_or_precondition(v, data, allow_unvalidated=True)
    assert set(data["smollm2_organisms"]) == {"locked", "deliberative"}
    assert "gates failed (R2;" in data["smollm2_organisms"]["locked"]
    assert data["smollm2_organism"].startswith("locked: precondition not met") and "deliberative: " in data[
        "smollm2_organism"]
