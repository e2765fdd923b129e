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
    assert m["ac2_yaml_max_abs_diff"].value <= 1e-12 and len(ctx.data["yaml_ac2"]) == 16
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_fixture_claims_can_fail() -> None:
    from agentmill.core.stats import Estimate

    exp = get("e176.fixture")
    v = exp.judge("quick", {"ac5_fixture_labels_matched_share": Estimate.exact(13 / 14, n=14),
                            "ac13_reproduced_share": Estimate.exact(18 / 20, n=20),
                            "ac2_yaml_max_abs_diff": Estimate.exact(1e-9)})
    assert v == {"E176-AC5-fixture": "not_supported", "E176-AC13": "not_supported", "E176-AC2-yaml": "not_supported"}
    ok = exp.judge("quick", {"ac5_fixture_labels_matched_share": Estimate.exact(1.0, n=14),
                             "ac13_reproduced_share": Estimate.exact(1.0, n=20),
                             "ac2_yaml_max_abs_diff": Estimate.exact(5e-15)})
    assert set(ok.values()) == {"supported"}


def test_yaml_comparison_detects_a_different_rule(tmp_path) -> None:
    """Power check: the WADD YAML scored against the library's EW must differ (validities are not all 1)."""
    import shutil

    from agentmill.experiments.e176_autocog.fixture import DEFAULT_FIXTURE, SETUPS, yaml_vs_library

    fx = tmp_path / "fx"
    shutil.copytree(DEFAULT_FIXTURE / "theories", fx / "theories")
    shutil.copy(fx / "theories" / "wadd.yaml", fx / "theories" / "ew.yaml")
    log: list = []
    yaml_vs_library(fx, SETUPS["smoke"], log)
    assert max(x["max_abs_diff"] for x in log if x["rule"] == "ew") > 0.01
    assert max(x["max_abs_diff"] for x in log if x["rule"] != "ew") <= 1e-12
