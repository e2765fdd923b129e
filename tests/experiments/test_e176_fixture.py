from __future__ import annotations

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def test_fixture_experiment_smoke(tmp_path) -> None:
    exp = get("e176.fixture")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    assert m["fixture_integrity_ok"].value == 1.0
    assert m["ac5_fixture_labels_matched_share"].value == 1.0 and m["ac5_fixture_labels_matched_share"].n == 7
    assert m["ac13_reproduced_share"].value == 1.0 and len(ctx.data["metric_rows"]) == 2
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_fixture_claims_can_fail() -> None:
    from agentmill.core.stats import Estimate

    exp = get("e176.fixture")
    v = exp.judge("quick", {"ac5_fixture_labels_matched_share": Estimate.exact(13 / 14, n=14),
                            "ac13_reproduced_share": Estimate.exact(18 / 20, n=20)})
    assert v == {"E176-AC5-fixture": "not_supported", "E176-AC13": "not_supported"}
    ok = exp.judge("quick", {"ac5_fixture_labels_matched_share": Estimate.exact(1.0, n=14),
                             "ac13_reproduced_share": Estimate.exact(1.0, n=20)})
    assert set(ok.values()) == {"supported"}
