"""D-2 (stingy simulation vs real training) and D-3 (steering compliance): registration, judges that can fail,
held-out data that is deterministic and unseen, and smoke runs of measure and plots."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def _e(v, lo, hi, n=300):
    return Estimate(v, lo, hi, n=n, method="wilson")


def test_registered_before_d4_with_quick_checks() -> None:
    from agentmill.experiments.e167_world_model import MODULES

    i = MODULES.index("sim_vs_real_policy")
    assert MODULES[i + 1:i + 3] == ("steering", "stingy_sim")
    for eid in ("e167.wm_steering", "e167.wm_stingy_sim"):
        assert get(eid).quick_check and not get(eid).parallel_safe


def test_d3_judges_can_fail() -> None:
    d3 = get("e167.wm_steering")
    good = {"d3_leak_instructed": _e(0.01, 0.002, 0.03), "d3_leak_uninstructed": _e(0.4, 0.35, 0.46),
            "d3_page_size": _e(0.98, 0.96, 0.99), "d3_error_form": _e(1.0, 0.99, 1.0)}
    assert set(d3.judge("full", good).values()) == {"supported"}
    bad = {"d3_leak_instructed": _e(0.3, 0.25, 0.35), "d3_leak_uninstructed": _e(0.1, 0.07, 0.14),
           "d3_page_size": _e(0.5, 0.44, 0.56), "d3_error_form": _e(0.2, 0.16, 0.25)}
    assert set(d3.judge("full", bad).values()) == {"not_supported"}


def test_d2_judges_can_fail() -> None:
    d2 = get("e167.wm_stingy_sim")
    e = lambda v, lo, hi: Estimate(v, lo, hi, n=3, method="two_stage_bootstrap", n_boot=100)  # noqa: E731
    good = {"d2_stingy_minus_real": e(0.08, 0.02, 0.14), "d2_controlled_minus_uncontrolled": e(0.05, 0.01, 0.1)}
    assert set(d2.judge("full", good).values()) == {"supported"}
    bad = {"d2_stingy_minus_real": e(-0.1, -0.2, -0.02), "d2_controlled_minus_uncontrolled": e(-0.05, -0.1, 0.0)}
    assert set(d2.judge("full", bad).values()) == {"not_supported"}


def test_held_out_data_is_deterministic_and_disjoint() -> None:
    from agentmill.experiments.e167_world_model.steering import SETUPS, held_out_searches
    from agentmill.experiments.e167_world_model.stingy_sim import _tasks
    from agentmill.methods.world_model.search_wm import SearchWMConfig, world_seeds

    cfg = SearchWMConfig()
    a = held_out_searches(SETUPS["quick"], cfg)
    b = held_out_searches(SETUPS["quick"], cfg)
    assert [(q.qid, c) for _w, q, c in a] == [(q.qid, c) for _w, q, c in b]
    assert all(c.startswith("web_search:") for _w, _q, c in a)
    splits = {s: set(world_seeds(s, 30)) for s in ("wm-train", "policy-train", "test")}
    assert not (splits["wm-train"] & splits["test"]) and not (splits["policy-train"] & splits["test"])
    assert not (splits["wm-train"] & splits["policy-train"])
    tr = _tasks("policy-train", 2, 8, cfg, "train", "d2-train")
    assert [q.hops for _w, q in tr] == [1] * 4 + [2] * 4


@pytest.mark.slow  # ~10 s: the smoke search world model trained in a temporary cache, then both experiments
def test_d2_and_d3_smoke(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    for eid, keys in (("e167.wm_steering", {"d3_leak_instructed", "d3_error_form", "real_env_leak"}),
                      ("e167.wm_stingy_sim", {"d2_stingy_minus_real", "d2_controlled_minus_uncontrolled",
                                              "test_success_real"})):
        exp = get(eid)
        ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"),
                         work_dir=tmp_path / eid.split(".")[1])
        out = exp.measure(exp.setups["smoke"], ctx)
        assert keys <= set(out)
        assert all(0.0 <= out[k].value <= 1.0 or k.endswith(("minus_real", "uncontrolled")) for k in out)
        (tmp_path / "plots").mkdir(exist_ok=True)
        assert exp.plots(ctx.data, tmp_path / "plots")
