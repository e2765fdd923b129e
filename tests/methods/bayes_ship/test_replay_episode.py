"""Replay against hand-traced episodes, the Episode driver, calibration recovery and the drift alarm."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from agentmill.methods.bayes_ship import (BayesShipConfig, Calibration, ControlState, CostModel, CriticModel, Decision,
                                          Episode, GreedyController, Kernel, run_episode)
from agentmill.methods.bayes_ship.baselines import always_verify, best_of_n, fixed_pipeline, gate, refine_then_verify
from agentmill.methods.bayes_ship.calibration import calibrate, critic_independence, drift_check
from agentmill.methods.bayes_ship.replay import CandidateRecord, compare_policies, read_records, simulate_policy
from agentmill.methods.bayes_ship.synthetic import WORLD_C, sample_trajectories

warnings.simplefilter("ignore", UserWarning)
COST = CostModel(R=100, c_gen=5, c_ver=30, critic_costs={"L0": 1.0, "L2": 2.0, "L3": 5.0})


def _traj(*cands):
    """cands: (y, {critic: passed}) per candidate."""
    return [CandidateRecord("i", f"i-{j}", j, crit, y) for j, (y, crit) in enumerate(cands)]


T = _traj((False, {"L0": True, "L2": False, "L3": True}), (True, {"L0": True, "L2": True, "L3": False}),
          (True, {"L0": False, "L2": True, "L3": True}))


def test_baselines_hand_traced() -> None:
    # always_verify: c_gen 5 + c_ver 30, wrong → −35
    assert simulate_policy(T, always_verify(), COST).utility == -35
    # best_of_3: three candidates (15) + verify (30), third correct → 100 − 45 = 55
    assert simulate_policy(T, best_of_n(3), COST).utility == 55
    # gate(L2): L2 fails on 1 (2), generate (5), L2 passes on 2 (2), verify correct: 100 − 5 − 2 − 5 − 2 − 30 = 56
    r = simulate_policy(T, gate("L2"), COST)
    assert r.utility == 56 and r.actions == ["generate", "critic:L2", "generate", "critic:L2", "verify"]
    # pipeline(L0, L3): 1: L0 ok, L3 ok → verify wrong: −5 −1 −5 −30 = −41
    assert simulate_policy(T, fixed_pipeline(("L0", "L3")), COST).utility == -41
    # gate(L0) on a trajectory whose every L0 fails: 3 candidates, 3 L0 calls, give up: −15 − 3 = −18
    bad = _traj(*[(False, {"L0": False})] * 3)
    r = simulate_policy(bad, gate("L0"), COST)
    assert r.utility == -18 and r.outcome == "gave_up"
    assert simulate_policy(T, refine_then_verify(1), COST).utility == 100 - 10 - 30


def test_a_critic_loop_terminates_at_the_action_cap() -> None:
    class Loop:
        name = "loop"

        def decide(self, s: ControlState) -> Decision:
            return Decision("critic", "L0", {}, s.belief)

    r = simulate_policy(T, Loop(), COST, max_actions=64)
    assert r.actions[-1] == "give_up (max_actions)" and r.costs["L0"] == 64


def test_compare_policies_and_record_round_trip(tmp_path) -> None:
    trajs = sample_trajectories(WORLD_C, 50, 0)
    p = tmp_path / "c.jsonl"
    p.write_text("".join(r.to_json() + "\n" for t in trajs for r in t))
    back = read_records(p)
    assert back[3] == trajs[0][3]
    cost = WORLD_C.cost(30.0)
    tab = compare_policies(trajs, [always_verify(), gate("L2"), GreedyController(WORLD_C.calibration(), cost)], cost)
    assert tab.reference == "always_verify" and tab.vs_reference["always_verify"].value == 0
    assert "gate(L2)" in tab.to_text()
    p.write_text('{"instance_id": "x"}\n')
    with pytest.raises(ValueError, match="c.jsonl:1"):
        read_records(p)


def test_episode_drives_a_loop_and_refuses_bad_calls() -> None:
    cal = Calibration(0.3, 0, {"L2": CriticModel("L2", 0.9, 0.2), "L0": CriticModel("L0", 0.9, 0.9)},
                      Kernel.iid(0.3))
    cost = CostModel(R=100, c_gen=5, c_ver=30, critic_costs={"L2": 2.0, "L0": 1.0})
    events = []
    ep = Episode(GreedyController(cal, cost), cal, cost, on_event=lambda k, p: events.append(k))
    outcomes = iter([True])
    r = run_episode(ep, critic=lambda k: next(outcomes), verify=lambda: True, generate=lambda: None)
    assert r.actions == ["generate", "critic:L2", "verify"] and r.utility == 100 - 5 - 2 - 30
    assert events[:2] == ["decision", "observe"] and r.outcome == "verified_correct"
    ep = Episode(GreedyController(cal, cost), cal, cost)
    with pytest.raises(ValueError, match="unknown critic"):
        ep.observe("L9", True)
    ep.observe("L2", True)
    with pytest.raises(ValueError, match="already observed"):
        ep.observe("L2", True)
    with pytest.raises(ValueError, match="wrong_ship_loss"):
        ep.shipped()
    ep.gave_up()
    with pytest.raises(ValueError, match="ended"):
        ep.next()


def test_families_update_once() -> None:
    a = CriticModel("A", 0.9, 0.2, family="tests")
    b = CriticModel("B", 0.9, 0.2, family="tests")
    cal = Calibration(0.3, 0, {"A": a, "B": b}, Kernel.iid(0.3))
    cost = CostModel(critic_costs={"A": 1.0, "B": 1.0})
    ep = Episode(GreedyController(cal, cost), cal, cost)
    ep.observe("A", True)
    b1 = ep.belief.value
    ep.observe("B", True)
    assert ep.belief.value == b1
    # the controller knows it: the second critic of a family has no value of information
    assert GreedyController(cal, cost).decide(ControlState(0.3, frozenset({"A"}))).critic != "B"


def test_non_terminal_verify_lets_the_loop_continue() -> None:
    cal = WORLD_C.calibration()
    cost = WORLD_C.cost(20.0)
    ep = Episode(GreedyController(cal, cost, BayesShipConfig(verify_terminal=False)), cal, cost)
    ep.verified(False)
    assert ep.outcome == "running" and ep.verified_wrong
    d = ep.next()
    assert d.action in ("generate", "give_up")
    ep.new_candidate()
    assert ep.belief.value == pytest.approx(cal.kernel.apply(0.0), abs=1e-5)


@pytest.mark.slow  # ~5 s: 300 small calibrations
def test_calibration_recovers_the_world_and_its_intervals_cover() -> None:
    trajs = sample_trajectories(WORLD_C, 2000, 0)
    cal = calibrate([r for t in trajs for r in t], list(WORLD_C.critics))
    for k, (p1, p0) in WORLD_C.critics.items():
        assert cal.critics[k].p_pass_y1 == pytest.approx(p1, abs=0.03)
        assert cal.critics[k].p_pass_y0 == pytest.approx(p0, abs=0.02)
    assert cal.prior == pytest.approx(0.2, abs=0.03)
    assert cal.kernel.p_fix == pytest.approx(0.2, abs=0.02) and cal.kernel.p_break == pytest.approx(0.8, abs=0.03)
    # coverage of the 95 % intervals of P(pass | correct) for L2 over many small calibrations
    hits, n = 0, 300
    for seed in range(n):
        c = calibrate([r for t in sample_trajectories(WORLD_C, 40, seed + 1) for r in t], ["L2"]).critics["L2"]
        (lo, hi), _ = c.ci()
        hits += lo <= 0.8 <= hi
    assert 0.90 <= hits / n <= 0.99
    with pytest.raises(ValueError, match="no label"):
        calibrate([CandidateRecord("i", "c", 0, {"L2": True}, None)], ["L2"])


def test_drift_alarm_fires_on_a_shifted_critic_only() -> None:
    cal = calibrate([r for t in sample_trajectories(WORLD_C, 1000, 0) for r in t], list(WORLD_C.critics))
    same = [r for t in sample_trajectories(WORLD_C, 400, 5) for r in t]
    assert drift_check(cal, same) == [] or len(drift_check(cal, same)) <= 1  # 8 tests at 99 %
    from agentmill.methods.bayes_ship.synthetic import SyntheticWorld

    shifted = SyntheticWorld("shift", 0.2, {**WORLD_C.critics, "L2": (0.8, 0.6)}, WORLD_C.critic_costs, 5.0)
    alarms = drift_check(cal, [r for t in sample_trajectories(shifted, 400, 6) for r in t])
    assert any(a.critic == "L2" and not a.y for a in alarms)


def test_critic_independence_sees_a_copied_critic() -> None:
    trajs = sample_trajectories(WORLD_C, 300, 0)
    recs = []
    for t in trajs:
        for r in t:
            recs.append(CandidateRecord(r.instance_id, r.candidate_id, r.step, {**r.critics, "L2copy": r.critics["L2"]},
                                        r.y))
    rows = {(x.a, x.b, x.y): x for x in critic_independence(recs, [("L2", "L2copy"), ("L2", "L3")], n_perm=200)}
    assert rows[("L2", "L2copy", False)].p_value < 0.01
    assert rows[("L2", "L3", False)].p_value > 0.001
    assert np.isfinite(rows[("L2", "L3", True)].cmi)
