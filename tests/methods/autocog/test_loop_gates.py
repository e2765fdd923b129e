"""The loop's gate choice (``LoopConfig.gate``) and its prospective scores, on a 1-round
programmatic run; and the recovery JSDs against the GT-vs-GT floor."""

from __future__ import annotations

import json
import math

import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.cohorts import SimulatedCohort
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
from agentmill.methods.autocog.recovery import GROUND_TRUTHS, battery_jsd, load_batteries


def _loop(tmp_path, gate: str) -> AutoCogLoop:
    adv = tuple(SearchAdvocate(n_designs=3, n_sim=20) for _ in range(2))
    return AutoCogLoop(LoopConfig(n_rounds=1, n_sim=20, gate=gate, seed=0), seeds=(L.tallying(), L.wadd()),
                       advocates=adv, arbiter=RuleArbiter(),
                       reviser=ProgramSpaceReviser(n_sim=20, max_candidates=6, rescore_n=20),
                       cohort=SimulatedCohort(L.ttb(), action_noise=0.0, seed=0), run_dir=tmp_path / gate)


@pytest.mark.parametrize("gate", ["power", "jsd_sequence"])
def test_loop_runs_with_the_chosen_gate(tmp_path, gate) -> None:
    loop = _loop(tmp_path, gate)
    res = loop.run()
    assert res.status == "done"
    gates = [e for e in loop.ledger.events if e["kind"] == "gate_result"]
    assert len(gates) == 4  # 2 slots × (1 round + validation round)
    payloads = [loop.ledger.get(e["step"]) for e in gates]
    assert {p["kind"] for p in payloads} == {gate} and all(p["stat"] is not None for p in payloads)
    conf = loop.ledger.get("config")["config"]
    assert conf["gate"] == gate
    # prospective: seeds (round 0) scored on both rounds; the round-1 admission only on the validation round
    assert set(res.prospective) == {t.name for t in loop.theories.values()}
    assert all(v is None or 0.0 <= v <= 1.0 for v in res.prospective.values())
    state = json.loads((loop.run_dir / "state.json").read_text())
    assert state["prospective"] == res.prospective


def test_battery_jsd_floor_and_a_wrong_theory() -> None:
    gt = GROUND_TRUTHS["ttb"]
    bat = load_batteries()[1]
    same = battery_jsd(gt.theory(), gt, bat, 0.0, n=200)
    wrong = battery_jsd(L.tallying(), gt, bat, 0.0, n=200)
    for k in ("jsd_static", "jsd_sequence"):
        assert 0 <= same[k] <= math.log(2) and 0 <= same[f"{k}_floor"] <= math.log(2)
    # the GT itself sits near its own floor; a different rule lies far above it
    assert same["jsd_static"] < 3 * same["jsd_static_floor"] + 0.01
    assert wrong["jsd_static"] > 5 * wrong["jsd_static_floor"] and wrong["jsd_static"] > 0.05
