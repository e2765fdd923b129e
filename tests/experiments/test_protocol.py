from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentmill.core.stats import Estimate
from agentmill.experiments import DuplicateExperimentError, build_registry
from agentmill.experiments.protocol import Claim, Experiment, parse_overrides


def _claim(direction=">=", threshold=1.0, upper=None, judge_on="ci") -> Claim:
    return Claim(id="C", statement="s", source="src", paper_value="p", metric="m", direction=direction,
                 threshold=threshold, upper=upper, judge_on=judge_on,
                 exact_why="a deterministic count" if judge_on == "exact" else "")


@pytest.mark.parametrize("est,verdict", [
    (Estimate(1.5, 1.2, 1.8, n=20), "supported"),
    (Estimate(1.5, 0.9, 1.8, n=20), "inconclusive"),
    (Estimate(0.5, 0.2, 0.8, n=20), "not_supported"),
    (Estimate.exact(1.0), "inconclusive"),  # a CI claim never falls back to the point (issue 24)
    (Estimate(float("nan"), float("nan"), float("nan")), "inconclusive"),
    (None, "inconclusive"),
])
def test_judge_needs_the_whole_ci_on_the_right_side(est, verdict) -> None:
    assert _claim().judge(est) == verdict


def test_judge_directions() -> None:
    assert _claim("<=", 0.07).judge(Estimate(0.05, 0.03, 0.06, n=20)) == "supported"
    assert _claim("<=", 0.07).judge(Estimate(0.05, 0.03, 0.09, n=20)) == "inconclusive"
    inside = _claim("in", -0.55, upper=-0.45)
    assert inside.judge(Estimate(-0.5, -0.52, -0.48, n=20)) == "supported"
    assert inside.judge(Estimate(-0.5, -0.6, -0.48, n=20)) == "inconclusive"
    assert inside.judge(Estimate(-0.3, -0.35, -0.2, n=20)) == "not_supported"
    assert _claim(judge_on="exact").judge(Estimate(1.1, 0.5, 1.5)) == "supported"
    with pytest.raises(ValueError):
        _claim("in", 1.0, upper=None)


def test_two_part_rule_point_threshold_and_ci_bound() -> None:
    """A two-part rule "≥ 1.5 and CI > 1": point must meet 1.5, the CI's lower end must clear 1."""
    c = Claim(id="C", statement="s", source="src", paper_value="p", metric="m", direction=">=", threshold=1.5,
              ci_bound=1.0)
    assert c.threshold_text == "≥ 1.5, CI > 1" and c.rule == "two_part"
    assert c.judge(Estimate(1.6, 1.1, 2.0, n=20)) == "supported"
    assert c.judge(Estimate(1.6, 0.9, 2.0, n=20)) == "inconclusive"
    assert c.judge(Estimate(1.2, 1.05, 1.6, n=20)) == "inconclusive"
    assert c.judge(Estimate(1.2, 1.05, 1.4, n=20)) == "not_supported"
    low = Claim(id="D", statement="s", source="src", paper_value="p", metric="m", direction="<=", threshold=0.8,
                ci_bound=1.0)
    assert low.judge(Estimate(0.7, 0.6, 0.95, n=20)) == "supported"
    assert low.judge(Estimate(0.7, 0.6, 1.05, n=20)) == "inconclusive"
    with pytest.raises(ValueError, match="ci_bound"):
        Claim(id="E", statement="s", source="src", paper_value="p", metric="m", direction="in", threshold=0,
              upper=1, ci_bound=0.5)


@dataclass(frozen=True)
class S:
    n: int = 3
    p: float = 0.5
    name: str = "a"
    flag: bool = False
    Gs: tuple[int, ...] = (2, 4)


def test_overrides_are_typed_and_typos_suggest() -> None:
    got = parse_overrides(S(), {"n": "7", "p": "0.25", "flag": "true", "Gs": "2,8,16", "name": "b"}, where="e")
    assert got == {"n": 7, "p": 0.25, "flag": True, "Gs": (2, 8, 16), "name": "b"}
    with pytest.raises(KeyError, match="Did you mean 'flag'"):
        parse_overrides(S(), {"flg": "1"}, where="e")
    with pytest.raises(ValueError, match="cannot parse"):
        parse_overrides(S(), {"n": "seven"}, where="e")


def test_experiment_requires_frozen_setups_for_every_profile() -> None:
    from tests.helpers.fake_experiments import _measure_coin

    @dataclass
    class Mutable:
        n: int = 1

    with pytest.raises(ValueError, match="missing profiles"):
        Experiment("x", "t", "p", (), {"smoke": S()}, _measure_coin, "note")
    with pytest.raises(TypeError, match="frozen"):
        Experiment("x", "t", "p", (), {"smoke": Mutable(), "quick": S(), "full": S()}, _measure_coin, "note")


def test_smoke_profile_never_judges() -> None:
    from tests.helpers.fake_experiments import COIN

    assert set(COIN.judge("smoke", {"mean": Estimate.exact(0.5)}).values()) == {"not_judged"}


def test_a_quick_check_experiment_keeps_observed_values_and_judges_at_full_only() -> None:
    """``quick_check`` (issue 24): at quick the claim metrics become ``<metric>_observed`` with the reason, so every
    claim is not judged and shows its value; smoke and full are untouched."""
    import dataclasses

    from tests.helpers.fake_experiments import COIN

    exp = dataclasses.replace(COIN, quick_check="quick is a pipeline check: judged at full")
    metric = COIN.claims[0].metric
    m = {metric: Estimate(0.9, 0.8, 1.0, n=30), "other": Estimate.exact(1.0)}
    data: dict = {}
    quick = exp.for_profile("quick", m, data)
    assert set(quick) == {f"{metric}_observed", "other"} and quick[f"{metric}_observed"] == m[metric]
    verdicts, reasons = exp.judge_with_reasons("quick", quick, data)
    assert set(verdicts.values()) == {"not_judged"}
    assert set(reasons.values()) == {"quick is a pipeline check: judged at full"}
    assert exp.for_profile("full", m, {}) == m and COIN.for_profile("quick", m, {}) == m
    assert "not_judged" not in exp.judge("full", m).values()


def test_registry_rejects_duplicates() -> None:
    with pytest.raises(DuplicateExperimentError):
        build_registry(("tests.helpers.fake_experiments_dup_a", "tests.helpers.fake_experiments_dup_b"))


def test_real_registry_loads_and_every_experiment_has_claims() -> None:
    reg = build_registry()
    assert "e162.collapse_law" in reg and "e162.collapse_llm" in reg
    for exp in reg.values():
        assert exp.claims and exp.scale_note
