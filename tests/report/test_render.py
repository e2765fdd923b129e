from __future__ import annotations

from agentmill.experiments.runner import run_suite
from agentmill.report import render_report
from tests.helpers.fake_experiments import COIN, CRASH, ECHO


def test_report_has_a_row_per_claim_error_rows_and_plots(tmp_path) -> None:
    recs = run_suite([COIN, CRASH], profile="quick", runs_dir=tmp_path / "runs")
    index = render_report(recs, {e.id: e for e in (COIN, CRASH, ECHO)}, tmp_path / "report")
    html = index.read_text()
    assert html.count("<b>F-") == 2 and "(not run)" in html  # ECHO has no record
    assert "class='v error'" in html and "deliberate failure" in html
    assert (tmp_path / "report" / "plots" / "fake.coin" / "running_mean.png").stat().st_size > 1000
    assert (tmp_path / "report" / "records" / "fake.coin.quick.json").exists()
    assert "supported" in html and "a numpy coin" in html


def test_model_column_names_the_setups_lm_specs_and_missing_metrics_say_why() -> None:
    from agentmill.core.records import RunRecord
    from agentmill.report.render import missing_reason, model_label

    assert model_label(RunRecord("x", "full", {"n": 3}, model="hf:smollm2")) == "hf:smollm2"
    assert model_label(RunRecord("x", "full", {"n": 3, "counter": "smollm2"})) == "none"
    rec = RunRecord("x", "full", {"base": "hf:smollm2", "summariser": "hf:smollm2", "judge": "openai:m@http://h/v1",
                                  "styles": ["hf:not-a-spec-field"]})
    assert model_label(rec) == "hf:smollm2 (base, summariser); openai:m@http://h/v1 (judge)"
    assert missing_reason(RunRecord("x", "full", {})) == "missing"
    assert missing_reason(RunRecord("x", "full", {}, data={"precondition": "precondition not met: organism failed gate(s) "
                                                                          "['G1']"})) == "precondition not met"
    assert missing_reason(RunRecord("x", "full", {}, data={"precondition": "met"})) == "missing"
    assert missing_reason(RunRecord("x", "quick", {}, data={"plan_only": "quick plans only"})) == \
        "not measured (plan only)"


def test_a_verdict_is_escaped_in_its_class_attribute_too(tmp_path) -> None:
    """Records read from disk carry only known verdicts (``RunRecord.read``), but a record built in code reaches
    the page unchecked: the class attribute must not be a way out of the markup."""
    from agentmill.core.records import RunRecord
    from agentmill.core.stats import Estimate

    rec = RunRecord("fake.coin", "quick", {"n": 3}, metrics={"mean": Estimate.exact(0.5)},
                    verdicts={"F-1": "x'><script>alert(1)</script>"})
    html = render_report([rec], {"fake.coin": COIN}, tmp_path).read_text()
    assert "<script>" not in html and "x&#x27;&gt;&lt;script&gt;" in html
