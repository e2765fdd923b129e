"""Smoke runs of every E171 experiment (measure and plots) on the shipped tiny organisms, and checks that their
judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

IDS = ("instrument", "decodability", "lockin", "valley", "defenses", "judges")


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory) -> None:
    """One rollout cache for the module: the organism experiments share FT-2's rollouts, as they do in a suite."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AGENTMILL_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def _ctx(tmp_path, profile: str = "smoke") -> RunContext:
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_registered_and_parallel_safe() -> None:
    from agentmill.experiments.e171_first_token_probe import MODULES

    assert set(IDS) <= set(MODULES)
    assert all(get(f"e171.first_token_probe_{m}").parallel_safe for m in IDS)


def test_shipped_organisms_carry_their_gates() -> None:
    from agentmill.methods.first_token_probe.organism import GATES, gates_pass, load_organism

    for variant in ("locked", "deliberative"):
        lm, card = load_organism(variant, allow_unvalidated=True)
        assert set(card.gates) == set(GATES) and card.gate_pass == gates_pass(card.gates)
        assert card.validated == all(card.gate_pass.values())
        assert lm.num_layers == 3 and lm.hidden_size == 64


@pytest.mark.slow
@pytest.mark.parametrize("name", IDS)
def test_smoke_measure_and_plots(name: str, tmp_path) -> None:
    exp = get(f"e171.first_token_probe_{name}")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert "precondition" not in ctx.data, ctx.data.get("precondition")  # smoke runs stamped, even unvalidated
    assert exp.judge("smoke", m, ctx.data) == {c.id: "not_judged" for c in exp.claims}
    assert exp.plots(ctx.data, tmp_path)


def test_judges_can_fail() -> None:
    exp = get("e171.first_token_probe_decodability")
    bad = {"ft2_auroc_think_open": Estimate(0.7, 0.6, 0.8, n=5, method="x"),
           "ft2_balacc_think_open": Estimate(0.9, 0.8, 0.95, n=5, method="x"),
           "ft2_permutation_p": Estimate.exact(0.2, n=19),
           "ft2_emitted_token_auroc": Estimate(0.5, 0.4, 0.6, n=5, method="x")}
    v = exp.judge("quick", bad, {})
    assert v["E171-FT2-auroc"] == "not_supported" and v["E171-FT2-perm"] == "not_supported"
    assert v["E171-FT2-balacc"] == "supported" and v["E171-FT2-emitted"] == "supported"
    d = get("e171.first_token_probe_defenses")
    assert d.judge("quick", {"ft6_pareto_arms": Estimate.exact(1.0, n=2),
                             "ft6_share_moving_raise_br": Estimate.exact(0.5, n=2)}) == {
        "E171-FT6-pareto": "not_supported", "E171-FT6-direction": "not_supported"}


def test_unvalidated_organism_is_a_precondition(tmp_path, monkeypatch) -> None:
    import agentmill.methods.first_token_probe.organism as org

    monkeypatch.setattr(org, "ORGANISM_DIR", tmp_path)
    exp = get("e171.first_token_probe_decodability")
    ctx = _ctx(tmp_path)
    assert exp.measure(exp.setups["quick"], ctx) == {}
    assert ctx.data["precondition"].startswith("precondition not met")
    v, why = exp.judge_with_reasons("quick", {}, ctx.data)
    assert set(v.values()) == {"inconclusive"}


def test_unvalidated_numbers_are_observed_only() -> None:
    from agentmill.experiments.e171_first_token_probe.substrate import finish

    exp = get("e171.first_token_probe_judges")
    data = {"unvalidated_organism": "precondition not met: tiny-refusal-locked failed its gates (R2)"}
    out = finish({"ft7_biased_probe_agrees_with_judge": Estimate(0.9, 0.8, 0.95, n=9, method="wilson")},
                 exp.claims, data)
    assert set(out) == {"ft7_biased_probe_agrees_with_judge_observed"}
    v, why = exp.judge_with_reasons("quick", out, data)
    assert set(v.values()) == {"inconclusive"} and why["E171-FT7-biased"].startswith("precondition not met")
