"""e176.strawman's human arm (NC-7 on the vendored fixture, human replay): scoring logic with a scripted
predictor (fast), and the real smoke run (slow: sandboxed pandas metrics)."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path):
    return RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)


def _fake_predict(argmax_value: float, sample_value: float):
    def predict(self, theory, obs, **kw):
        return argmax_value if theory.policy == "argmax" else sample_value
    return predict


def test_human_arm_judges_from_the_seeds_rows(tmp_path, monkeypatch) -> None:
    """Scripted predictions: argmax always 1.0, sampling at the real value → every pair is 'below' unless the real
    value is 1.0; the null-real cardinal observation is skipped; the judge sees the human share, not the simulated."""
    from agentmill.methods.autocog.cohorts import ReplayCohort
    import agentmill.experiments.e176_autocog.strawman as E

    exp = get("e176.strawman")
    monkeypatch.setattr(ReplayCohort, "predict", _fake_predict(1.0, 0.5))
    s = E.Setup(n_obs=1, human_runs=("binary", "cardinal"))
    ctx = _ctx(tmp_path)
    m = exp.measure(s, ctx)
    # 19 observations with a real value × 2 seeds; argmax 1.0 vs sample 0.5: below iff |1 - r| > |0.5 - r| iff r < .75
    rows = ctx.data["human_rows"]
    assert len(rows) == 38 and m["nc7_human_skipped_null_real"].value == 1
    want = sum(r["real"] < 0.75 for r in rows) / 38
    assert m["nc7_argmax_below_share"].value == pytest.approx(want) and 0.5 < want < 1
    assert m["nc7_human_off_design"].value == 33  # 5+6+5+5+6+6 participants in the cardinal round 2-4 files
    assert {r["rule"] for r in rows if r["run"] == "cardinal"} == {"ttb", "tallying"}
    assert {r["rule"] for r in rows if r["run"] == "binary"} == {"ttb", "wadd_weighted"}


def test_human_arm_can_fail_and_ties_are_not_below(tmp_path, monkeypatch) -> None:
    from agentmill.methods.autocog.cohorts import ReplayCohort

    exp = get("e176.strawman")
    monkeypatch.setattr(ReplayCohort, "predict", _fake_predict(0.3, 0.3))  # identical predictions: never below
    m = exp.measure(exp.setups["smoke"], _ctx(tmp_path))
    assert m["nc7_argmax_below_share"].value == 0.0
    assert exp.judge("quick", m)["E176-NC7"] == "not_supported"


@pytest.mark.slow
def test_strawman_smoke_human_rows(tmp_path) -> None:
    exp = get("e176.strawman")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    (a, b) = ctx.data["human_rows"]  # one binary observation × its two seeds
    assert a["obs"] == b["obs"] == "binary/round_000_obs_00" and {a["rule"], b["rule"]} == {"ttb", "wadd_weighted"}
    assert a["pred_argmax"] == a["committed_argmax"] == 1.0  # TTB argmax = the authors' pi_1 prediction
    assert m["nc7_argmax_below_share"].value == sum(r["below"] for r in (a, b)) / 2
    assert m["nc7_sim_pairs_scored"].value == len(ctx.data["rows"]) and len(exp.plots(ctx.data, tmp_path)) == 1
