"""Smoke runs of the E176 engineering/control experiments (AC-8 resume, AC-11 sandbox, NC-7 strawman seeds) and
checks that their judges can fail."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _ctx(tmp_path, profile: str = "smoke"):
    return RunContext(profile=profile, model="none", executor=make_executor("serial"), work_dir=tmp_path)


def test_sandbox_smoke_contains_every_case(tmp_path) -> None:
    exp = get("e176.sandbox")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    bad = [(r["case"], r["got"], r["message"]) for r in ctx.data["cases"] if not r["contained"]]
    assert not bad and m["ac11_contained_share"].value == 1.0
    assert {r["case"] for r in ctx.data["cases"]} >= {"DNS lookup", "fork", "file delete (os.remove)", "huge output"}
    assert exp.judge("quick", m) == {"E176-AC11": "supported"}
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_sandbox_case_fails_on_wrong_error(monkeypatch) -> None:
    """A case whose expected error is not the one raised is not contained (the judge can fail)."""
    import agentmill.experiments.e176_autocog.sandbox as E

    src, _, layer = E.CASES["NaN output"]
    monkeypatch.setitem(E.CASES, "NaN output", (src, "SandboxTimeout", layer))
    r = E.run_case("NaN output")
    assert r["got"] == "TheoryOutputError" and not r["contained"]
    with pytest.raises(ValueError, match="unknown AC-11 case"):
        E.run_case("no such case")


@pytest.mark.slow  # runs the human arm too: sandboxed pandas metrics (~5 s)
def test_strawman_smoke(tmp_path) -> None:
    exp = get("e176.strawman")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    rows = ctx.data["rows"]
    assert 0 < len(rows) <= 3 * 7 and {r["rule"] for r in rows} == {"ttb", "tallying", "wadd"}
    assert m["nc7_sim_argmax_below_share"].value == sum(r["below"] for r in rows) / len(rows)  # reported arm
    assert len(ctx.data["leaderboard"]) == 6 and len(exp.plots(ctx.data, tmp_path)) == 1


def test_kill_points_are_uniform_distinct_and_inside() -> None:
    from agentmill.experiments.e176_autocog.resume import kill_points

    pts = kill_points(10, 5, seed=0)
    assert pts == sorted(set(pts)) and len(pts) == 5 and all(1 <= p <= 9 for p in pts)
    assert kill_points(4, 20, seed=1) == [1, 2, 3]  # capped at the n-1 interior events
    with pytest.raises(ValueError, match="cannot be killed"):
        kill_points(1, 1, seed=0)


@pytest.mark.slow
def test_resume_smoke(tmp_path) -> None:
    exp = get("e176.resume")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    (k,) = ctx.data["kills"]
    assert k["landed"] and k["passed"], k
    assert m["ac8_kill_points_passing"].value == 1.0 and ctx.data["reference_audit"] == []
    (lk,) = ctx.data["lm_arm"]["kills"]  # the Scripted-LM arm: same checks + the reference's lm_call events
    assert lk["passed"] and lk["lm_calls"] == ctx.data["lm_arm"]["reference_lm_calls"] > 0, lk
    assert m["ac8_lm_kill_points_passing"].value == 1.0
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow
def test_durability_smoke(tmp_path) -> None:
    exp = get("e176.durability")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    (r,) = ctx.data["runs"]
    assert r["kill_at"] is not None and r["restart_at"] > r["kill_at"]
    assert m["ac10_acked"].value == 3 * 12 and m["ac10_violations"].value == 0, r
    assert len(exp.plots(ctx.data, tmp_path)) == 1


@pytest.mark.slow
@pytest.mark.browser
def test_browser_smoke(tmp_path) -> None:
    exp = get("e176.browser")
    ctx = _ctx(tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    if "skipped" in ctx.data:
        pytest.skip(ctx.data["skipped"])
    assert ctx.data["n_trials"] == 20 and ctx.data["checks"] == dict.fromkeys(ctx.data["checks"], True), ctx.data
    assert m["ac9_checks_passed"].value == 1.0
    assert len(exp.plots(ctx.data, tmp_path)) == 3  # timeline + consent and trial screenshots


def test_browser_without_chromium_is_not_judged_with_the_install_line(tmp_path, monkeypatch) -> None:
    """No Chromium: nothing measured, so the claim says why (``make browser-deps``) instead of NaN → inconclusive."""
    from agentmill.experiments.e176_autocog.browser import CHROMIUM_MISSING
    from agentmill.methods.autocog.web import browserbot

    monkeypatch.setattr(browserbot.shutil, "which", lambda name: None if name == "chromium" else f"/usr/bin/{name}")
    exp = get("e176.browser")
    ctx = _ctx(tmp_path, "quick")
    m = exp.measure(exp.setups["quick"], ctx)
    assert m == {}  # no browser session: nothing to record, not even a NaN
    assert exp.judge_with_reasons("quick", m, ctx.data) == ({"E176-AC9": "not_judged"}, {"E176-AC9": CHROMIUM_MISSING})
    assert CHROMIUM_MISSING == "skipped: Chromium not installed (`make browser-deps`)"


def test_browser_judge_fails_on_one_failed_check() -> None:
    from agentmill.core.stats import Estimate

    exp = get("e176.browser")
    assert exp.judge("quick", {"ac9_checks_passed": Estimate.exact(5 / 6, n=6)}) == {"E176-AC9": "not_supported"}
    assert exp.judge("quick", {"ac9_checks_passed": Estimate.exact(float("nan"))}) == {"E176-AC9": "inconclusive"}


def test_noise_controls_are_judged_only_with_five_seeds() -> None:
    """NC-1/NC-2: pass = r >= .90 in <= 1/5 seeds for every GT; a 2/5 GT fails; quick (1 seed) is only reported."""
    from agentmill.core.stats import Estimate
    from agentmill.experiments.e176_autocog.recovery import NC_MIN_SEEDS, SETUPS

    exp = get("e176.recovery")
    v = exp.judge("full", {"nc1_max_gt_share_r_ge_090": Estimate.exact(0.4),
                           "nc2_max_gt_share_r_ge_090": Estimate.exact(0.2)})
    assert v["E176-NC1"] == "not_supported" and v["E176-NC2"] == "supported"
    assert SETUPS["full"].seeds >= NC_MIN_SEEDS > SETUPS["quick"].seeds
    assert SETUPS["full"].nc1 and SETUPS["full"].nc2
