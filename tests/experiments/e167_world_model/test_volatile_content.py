"""W-6 (volatile content): the equivalence interval on hand-made inputs, judges that can fail, and a smoke run of
measure and plots in a temporary cache."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext

EID = "e167.wm_volatile_content"


def test_registered_as_a_quick_check() -> None:
    from agentmill.experiments.e167_world_model import MODULES

    assert "volatile_content" in MODULES
    exp = get(EID)
    assert exp.quick_check and not exp.parallel_safe


def test_tost_interval_is_a_90_percent_cluster_interval() -> None:
    from agentmill.experiments.e167_world_model.volatile_content import tost_interval

    rng = np.random.default_rng(0)
    units = [f"L{i // 4}" for i in range(80)]
    a = rng.normal(0.5, 0.1, 80)
    est = tost_interval(a + 0.001, a, units, 500)  # a constant tiny shift: the interval hugs it
    assert est.level == pytest.approx(0.90) and est.n == 20
    assert est.value == pytest.approx(0.001) and est.lo == pytest.approx(0.001) and est.hi == pytest.approx(0.001)
    b = a + rng.normal(0.0, 0.2, 80)
    wide90 = tost_interval(a, b, units, 2000)
    from agentmill.core.stats import cluster_bootstrap

    d = a - b
    wide95 = cluster_bootstrap(lambda i: float(d[i].mean()), units, n_boot=2000, level=0.95)
    assert wide90.hi - wide90.lo < wide95.hi - wide95.lo


def test_judges_can_fail() -> None:
    exp = get(EID)
    e = lambda v, lo, hi: Estimate(v, lo, hi, n=30, level=0.9, method="cluster_bootstrap", n_boot=100)  # noqa: E731
    good = {"w6_raw_em": proportion_estimate(0, 384), "w6_scrubbed_f1_delta": e(0.005, -0.02, 0.025),
            "w6_id_realism": proportion_estimate(380, 384)}
    assert set(exp.judge("full", good).values()) == {"supported"}
    bad = {"w6_raw_em": proportion_estimate(100, 384), "w6_scrubbed_f1_delta": e(-0.08, -0.10, -0.057),
           "w6_id_realism": proportion_estimate(0, 384)}
    assert set(exp.judge("full", bad).values()) == {"not_supported"}
    straddle = {"w6_scrubbed_f1_delta": e(-0.01, -0.04, 0.02)}
    assert exp.judge("full", straddle)["E167-W6-f1"] == "inconclusive"


@pytest.mark.slow  # ~6-10 s: the smoke pipeline and the smoke UniqueObs model trained in a temporary cache
def test_smoke_measure_and_plots(tmp_path, tmp_path_factory, monkeypatch) -> None:
    # one smoke pipeline cache per test session, shared by the W-6 and perf smoke tests (stages are written to a
    # temporary directory and renamed, so a reader never sees half a stage)
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path_factory.getbasetemp() / "e167-smoke-cache"))
    exp = get(EID)
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path / "w")
    ctx.work_dir.mkdir()
    m = exp.measure(exp.setups["smoke"], ctx)
    assert all(c.metric in m for c in exp.claims)
    assert m["w6_scrubbed_f1_delta"].level == pytest.approx(0.90)
    assert ctx.data["items"] == exp.setups["smoke"].eval_items
    assert len(exp.plots(ctx.data, ctx.work_dir)) == 1
    assert all(v == "not_judged" for v in exp.judge("smoke", m).values())
    q = exp.for_profile("quick", m, dict(ctx.data))
    assert not {c.metric for c in exp.claims} & set(q)
