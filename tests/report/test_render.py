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
