"""Smoke runs of every E167 experiment (measure and plots), and checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

LEARNING = ("e167.wm_cpt_vs_sft", "e167.wm_sft_reasoning", "e167.wm_rl_fidelity", "e167.wm_judge_flattery_rl",
            "e167.wm_closed_loop_gap", "e167.wm_sim_vs_real_policy")


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered() -> None:
    from agentmill.experiments.e167_world_model import MODULES

    assert len(MODULES) == 20
    assert get("e167.wm_format_conformance").parallel_safe and not get("e167.wm_cpt_vs_sft").parallel_safe
    for eid in LEARNING:
        assert get(eid).quick_check, eid


@pytest.mark.slow  # ~3 s: 2,200 parses and two exported episodes
def test_format_conformance_smoke(tmp_path) -> None:
    exp = get("e167.wm_format_conformance")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["m1_parser_agreement"].value == 1.0 and m["m1_message_equality"].value == 1.0
    assert exp.judge("quick", m)["E167-M1-parser"] == "supported"
    bad = dict(m, m1_parser_agreement=Estimate.exact(0.99, n=2040))
    assert exp.judge("quick", bad)["E167-M1-parser"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_reference_parser_catches_a_planted_bug() -> None:
    from agentmill.experiments.e167_world_model.format_conformance import HAND, reference_extract

    # a parser that takes the FIRST opening tag would disagree with the reference on the two-block case
    two = [h for h in HAND if h.count("<predicted_observation>") == 2][0]
    first = two.split("<predicted_observation>")[1].split("</predicted_observation>")[0]
    assert reference_extract(two, True) != first


@pytest.mark.slow  # ~5 s: 60 + 30 items and their bootstraps
def test_rule_dims_and_judge_smoke(tmp_path) -> None:
    for eid in ("e167.wm_rule_dims_validity", "e167.wm_judge_susceptibility"):
        exp = get(eid)
        ctx = _ctx(tmp_path)
        m = exp.measure(exp.setups["smoke"], ctx)
        assert all(v.value == v.value for v in m.values()), eid
        assert len(exp.plots(ctx.data, tmp_path)) == 1
    m2 = get("e167.wm_rule_dims_validity")
    bad = {"m2_gt_min": Estimate.exact(80.0, n=60)}
    assert m2.judge("quick", bad)["E167-M2-gt"] == "not_supported"


@pytest.mark.slow  # ~30 s: the smoke pipeline (1-layer d=32 model) trained once, then every learning experiment
def test_learning_experiments_smoke(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    for eid in LEARNING:
        exp = get(eid)
        ctx = _ctx(tmp_path / eid.split(".")[1])
        ctx.work_dir.mkdir(parents=True)
        m = exp.measure(exp.setups["smoke"], ctx)
        assert m, eid
        exp.plots(ctx.data, ctx.work_dir)
        assert exp.judge("smoke", m) and all(v == "not_judged" for v in exp.judge("smoke", m).values())
        q = exp.for_profile("quick", m, dict(ctx.data))
        claim_metrics = {c.metric for c in exp.claims}
        assert not claim_metrics & set(q) and any(k.endswith("_observed") for k in q), eid
    w1 = get("e167.wm_cpt_vs_sft")
    good = Estimate(0.05, 0.01, 0.09, n=30, method="cluster_bootstrap", n_boot=100)
    assert w1.judge("full", {"w1_delta_f1": good})["E167-W1"] == "supported"
    assert w1.judge("full", {"w1_delta_f1": Estimate(0.0, -0.03, 0.02, n=30, method="b", n_boot=100)}
                    )["E167-W1"] == "not_supported"
