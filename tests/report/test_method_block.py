from __future__ import annotations

import pytest

from agentmill.experiments.runner import run_suite
from agentmill.report.markdown import method_docs
from agentmill.report.results import save_summaries
from tests.helpers.fake_experiments import COIN


def test_method_doc_claims_span_is_rendered_from_results_and_the_rest_kept(tmp_path) -> None:
    exps = {COIN.id: COIN}
    save_summaries(run_suite([COIN], profile="full", runs_dir=tmp_path / "runs"), exps, tmp_path / "results")
    docs = tmp_path / "docs"
    (docs / "methods").mkdir(parents=True)
    page = docs / "methods" / "coin.md"
    page.write_text("# Coin\n\nintro\n\n<!-- claims:FAKE -->\nstale\n<!-- /claims -->\n\nafter\n")
    text = method_docs(exps, tmp_path / "results", docs / "methods", docs / "verdicts.md")[page]
    assert text.startswith("# Coin\n\nintro\n\n<!-- claims:FAKE -->") and text.endswith("<!-- /claims -->\n\nafter\n")
    assert "stale" not in text and "| **F-1**" in text and "**supported**" in text  # the full run judges F-1
    row = next(line for line in text.splitlines() if line.startswith("| **F-1**"))
    assert row.split(" | ")[3] == "no record"  # quick: no summary committed; full: judged
    assert "[verdicts](../verdicts.md#fake)" in text
    page.write_text("<!-- claims:E999 -->\n<!-- /claims -->\n")
    with pytest.raises(ValueError, match="names no registered paper"):
        method_docs(exps, tmp_path / "results", docs / "methods", docs / "verdicts.md")
