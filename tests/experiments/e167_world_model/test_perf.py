"""e167.wm_perf: the call counter and query log on a scripted fake, latency windows by hand, judges that can fail,
PERF-8's timer on a small setting, and a smoke run of measure and plots in a temporary cache."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

EID = "e167.wm_perf"


def test_registered_as_a_timing() -> None:
    from agentmill.experiments.e167_world_model import MODULES

    assert "perf" in MODULES
    assert not get(EID).parallel_safe


def test_counter_log_and_windows_by_hand() -> None:
    from agentmill.experiments.e167_world_model.perf import _CountingLM, _QueryLog, _windows

    class Fake:
        spec = "scripted:fake"

        def generate(self, prompts, cfg):
            return [p.upper() for p in prompts]

    lm = _CountingLM(Fake())
    assert lm.generate(["a", "b"], None) == ["A", "B"] and lm.generate(["c"], None) == ["C"]
    assert lm.calls == 3 and len(lm.seconds) == 2 and lm.spec == "scripted:fake"

    class Inner:
        def predict_next(self, items):
            return [o for o, *_ in items]

    q = _QueryLog(Inner())
    assert q.predict_next([("o1", "go north", "g", None), ("o1", "go north", "g", None)]) == ["o1", "o1"]
    assert len(q.keys) == 2 and q.keys[0] == q.keys[1]
    q.predict_next([("o2", "go north", "g", None)])
    assert q.keys[2] != q.keys[0]
    assert _windows([1.0, 3.0, 2.0, 4.0, 9.0], 2) == [2.0, 3.0]  # the incomplete last window is dropped
    assert _windows([5.0], 3) == [5.0]


def test_judges_can_fail() -> None:
    exp = get(EID)
    good = {"perf1_call_ratio": Estimate.exact(25.0, n=4000), "perf1_wall_ratio": repeats_estimate([9.0, 10.0, 11.0],
                                                                                                    log=True),
            "perf5_rule_items_per_s": repeats_estimate([9e3, 1e4, 1.1e4], log=True),
            "perf5_lexical_items_per_s": repeats_estimate([4e3, 4.2e3, 4.4e3], log=True),
            "perf6_cpt_tokens_per_s": repeats_estimate([3e3, 3.1e3, 3.2e3], log=True),
            "perf2_tiny_batch_speedup": repeats_estimate([7.0, 7.5, 8.0], log=True),
            "perf2_smollm2_batch_speedup": repeats_estimate([3.5, 3.7, 3.9], log=True),
            "perf8_world_gen_s": repeats_estimate([0.02, 0.021, 0.022], log=True),
            "perf8_search_s": repeats_estimate([5e-4, 5.5e-4, 6e-4], log=True)}
    assert set(exp.judge("full", good).values()) == {"supported"}
    bad = {"perf1_call_ratio": Estimate.exact(4.0, n=400), "perf1_wall_ratio": repeats_estimate([2.0, 2.1, 2.2],
                                                                                                 log=True),
           "perf5_rule_items_per_s": repeats_estimate([2e3, 2.1e3, 2.2e3], log=True),
           "perf5_lexical_items_per_s": repeats_estimate([9e2, 1e3, 1.1e3], log=True),
           "perf6_cpt_tokens_per_s": repeats_estimate([9e2, 1e3, 1.1e3], log=True),
           "perf2_tiny_batch_speedup": repeats_estimate([2.0, 2.2, 2.4], log=True),
           "perf2_smollm2_batch_speedup": repeats_estimate([1.5, 1.6, 1.7], log=True),
           "perf8_world_gen_s": repeats_estimate([0.2, 0.21, 0.22], log=True),
           "perf8_search_s": repeats_estimate([9e-3, 1e-2, 1.1e-2], log=True)}
    assert set(exp.judge("full", bad).values()) == {"not_supported"}


def test_factsearch_speed_small() -> None:
    import dataclasses

    from agentmill.experiments.e167_world_model.perf import SETUPS, factsearch_speed

    s = dataclasses.replace(SETUPS["smoke"], fs_worlds=1, fs_searches=5, fs_repeats=2)
    out = factsearch_speed(s)
    assert out["pages"] == 70 and out["n_queries"] == 5  # the default world: 60 entities + 10 news pages
    assert len(out["world_gen_s"]) == len(out["search_s"]) == 2 and all(x > 0 for x in out["search_s"])


@pytest.mark.slow  # ~15-25 s: the smoke pipeline trained in a temporary cache, then every part at smoke size
def test_smoke_measure_and_plots(tmp_path, tmp_path_factory, monkeypatch) -> None:
    # one smoke pipeline cache per test session, shared by the W-6 and perf smoke tests (stages are written to a
    # temporary directory and renamed, so a reader never sees half a stage)
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path_factory.getbasetemp() / "e167-smoke-cache"))
    exp = get(EID)
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path / "w")
    ctx.work_dir.mkdir()
    m = exp.measure(exp.setups["smoke"], ctx)
    assert ctx.data["perf1_prefix_identical"] is True
    p1 = ctx.data["perf1"]
    assert p1["uncached"]["calls"] == p1["uncached"]["queries"] > 0
    assert p1["cached"]["calls"] <= p1["cached"]["queries"]
    assert {"perf1_call_ratio_observed", "perf5_rule_items_per_s", "perf6_cpt_tokens_per_s",
            "perf2_tiny_batch_speedup_observed", "perf8_world_gen_s", "perf8_search_s"} <= set(m)
    p2 = ctx.data["perf2_tiny"]
    assert p2["identical_texts"] and len(p2["ratios"]) == 2 and p2["seq"][0][0] == p2["batch"][0][0] > 0
    assert "perf2_smollm2_batch_speedup" not in m and "perf2_smollm2" not in ctx.data  # full only
    assert ctx.data["cpu"]["model"] and set(ctx.data["perf4_real_step_s"]) >= {"keydoor", "factsearch"}
    assert len(exp.plots(ctx.data, ctx.work_dir)) == 1
    assert all(v == "not_judged" for v in exp.judge("smoke", m).values())
