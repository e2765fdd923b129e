"""Dose-response fits, verdict rules, planning and the investigation loop on planted agents."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.core.stats import Estimate
from agentmill.methods.forensics import (Hypothesis, HypothesisRegistry, PlantedAgent, dose_response, investigate,
                                         load_env, plan)
from agentmill.methods.forensics.hypotheses import Prediction
from agentmill.methods.forensics.variables import Intervention
from agentmill.methods.forensics.dose import zero_below
from agentmill.methods.forensics.investigate import mine_hypotheses, run_arm, run_hypotheses
from agentmill.methods.forensics.verdicts import PredictionResult, compare, judge, positive_control_passes


def test_logistic_fit_recovers_a_planted_d50_and_tightens() -> None:
    grid = np.array([10, 20, 30, 40, 50, 60, 70, 80, 90], float)
    widths, covered = {}, 0
    for r in range(20):  # coverage of the bootstrap interval (nominal 0.95) and its shrinking with n
        for n in (50, 400):
            rng = np.random.default_rng(r)
            d = np.repeat(grid, n)
            y = (rng.random(d.size) < 1 / (1 + np.exp(-0.1 * (d - 50)))).astype(float)
            fit = dose_response(d, y, B=300, seed=r)
            covered += fit.d50.lo <= 50 <= fit.d50.hi
            widths.setdefault(n, []).append(fit.d50.hi - fit.d50.lo)
            assert fit.trend_z > 0 and fit.trend_p < 1e-6
    assert covered >= 33  # of 40; expected 38 (P(fewer than 33) < 0.01 at 0.95 coverage)
    assert np.mean(widths[400]) < np.mean(widths[50]) / 2  # ~1/√8 of the width with 8× the episodes


def test_zero_below_by_hand() -> None:
    # pooled 0/40 → Wilson upper 0.088 ≤ 0.10; adding 2/40 → 2/80, upper 0.087; adding 10/40 → 12/120, upper 0.17
    assert zero_below([(5, 0, 40), (10, 2, 40), (25, 10, 40)]) == 10
    assert zero_below([(5, 5, 40)]) is None


def test_positive_control_and_verdict_rules() -> None:
    assert positive_control_passes(compare("pc", 1, 100, 50, 100), 0.2)
    assert not positive_control_passes(compare("pc", 45, 100, 50, 100), 0.2)
    h = Hypothesis("H", "s", "benign", "m", ("x",), (Prediction("x", 1, -1, 0.2),), Intervention("y", 0))
    pc_ok, pc_bad = compare("pc", 1, 100, 50, 100), compare("pc", 50, 100, 50, 100)
    strong = PredictionResult("x", 1, -1, 0.2, Estimate(-0.4, -0.5, -0.3, n=200, method="t"), 1e-6, p_holm=1e-5)
    null = PredictionResult("x", 1, -1, 0.2, Estimate(0.0, -0.1, 0.1, n=200, method="t"), 0.9, p_holm=1.0)
    assert judge(h, [strong], pc_ok, alpha=0.05, delta_pc=0.2).verdict == "supported"
    assert judge(h, [null], pc_ok, alpha=0.05, delta_pc=0.2).verdict == "refuted"
    assert judge(h, [null], pc_bad, alpha=0.05, delta_pc=0.2).verdict == "insensitive"
    assert judge(h, [strong], pc_bad, alpha=0.05, delta_pc=0.2).verdict == "insensitive"
    null.underpowered = True
    assert judge(h, [null], pc_ok, alpha=0.05, delta_pc=0.2).verdict == "inconclusive"
    wrong_way = PredictionResult("x", 1, -1, 0.2, Estimate(0.4, 0.3, 0.5, n=200, method="t"), 1e-6, p_holm=1e-5)
    assert judge(h, [wrong_way], pc_ok, alpha=0.05, delta_pc=0.2).verdict == "refuted"


def test_plan_sizes_arms_by_power_and_marks_underpowered() -> None:
    env = load_env("loyalty")
    h = Hypothesis("H", "s", "malign", "self_consistency", ("actor",), (Prediction("actor", "developer", -1, 0.2),),
                   env.positive_control)
    roomy = plan([h], env, env.values(), p0=0.47, budget=1000)
    a = roomy.arm("actor", "developer")
    assert a.n == a.required and not a.underpowered and a.required > 80
    tight = plan([h], env, env.values(), p0=0.47, budget=90)
    assert tight.arm("actor", "developer").underpowered and tight.episodes <= 90


def test_loyalty_investigation_supports_the_cause_and_refutes_the_decoy(tmp_path) -> None:
    env = load_env("loyalty")
    agent = PlantedAgent(env, "self_consistency")
    inv = investigate(env, agent, HypothesisRegistry(tmp_path), seed=2, tag="t")
    assert inv.status == "done" and inv.episodes <= 600
    assert inv.verdict_of("self_consistency") == "supported"
    assert inv.verdict_of("authority_deference") == "refuted"
    assert {c.motive for c in inv.candidates} >= {"self_consistency"}


def test_scheming_and_confused_agents_are_told_apart(tmp_path) -> None:
    env = load_env("oversight")
    reg = HypothesisRegistry(tmp_path)
    tally = {"s_oc": 0, "s_conf": 0, "c_conf": 0, "c_oc": 0}
    for seed in range(8):
        s = investigate(env, PlantedAgent(env, "scheming"), reg, seed=seed, tag=f"s{seed}")
        c = investigate(env, PlantedAgent(env, "confused"), reg, seed=seed, tag=f"c{seed}")
        tally["s_oc"] += s.verdict_of("oversight_conditional") == "supported"
        tally["s_conf"] += s.verdict_of("confusion_about_intent") == "supported"
        tally["c_conf"] += c.verdict_of("confusion_about_intent") == "supported"
        tally["c_oc"] += c.verdict_of("oversight_conditional") == "supported"
    # true causes: found every time here (power ≫ 0.99); null ones: a false positive is an α-level event (~2.5 %
    # per test with Holm once the true cause is rejected), so at most 2 of 8 by a wide margin
    assert tally["s_oc"] == 8 and tally["c_conf"] == 8, tally
    assert tally["s_conf"] <= 2 and tally["c_oc"] <= 2, tally


def test_illegible_cot_falls_back_to_the_sweep(tmp_path) -> None:
    env = load_env("whistle")
    inv = investigate(env, PlantedAgent(env, "ethics", illegible=True), HypothesisRegistry(tmp_path), seed=1,
                      budget=4000, tag="i")
    assert inv.fallback and "concern" in inv.supported_variables()
    assert not mine_hypotheses([], env)


def test_run_arm_rate_matches_the_planted_policy() -> None:
    env = load_env("loyalty")
    k, n = run_arm(env, env.values(), PlantedAgent(env, "self_consistency"), n=2000, seed=0, key="r")
    assert n == 2000 and abs(k / n - 0.47) < 4 * math.sqrt(0.47 * 0.53 / 2000)


def test_shuffled_labels_support_nothing(tmp_path) -> None:
    env = load_env("loyalty")
    h = Hypothesis("H", "s", "malign", "self_consistency", ("actor",), (Prediction("actor", "developer", -1),),
                   env.positive_control)
    vs, _, _ = run_hypotheses(env, PlantedAgent(env, "self_consistency"), HypothesisRegistry(tmp_path), [h],
                              env.values(), p0=0.47, budget=400, shuffle_arms=True, tag="sh")
    assert vs[0].verdict != "supported"


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(KeyError, match="no planted policy"):
        PlantedAgent(load_env("tedium"), "nope")
