from __future__ import annotations

import re

from agentmill.core.records import RunRecord
from agentmill.core.stats import Estimate
from agentmill.experiments.runner import run_suite
from agentmill.report import render_report
from agentmill.report.results import save_summaries
from tests.helpers.fake_experiments import COIN, CRASH, ECHO

EXPS = {e.id: e for e in (COIN, CRASH, ECHO)}


def _counts(html: str) -> dict[str, str]:
    """The first verdict-count list of a page: badge text -> the number after it."""
    ul = re.search(r"<ul class='counts[^']*'>(.*?)</ul>", html).group(1)
    return dict(re.findall(r"<span class='v [a-z_]+'>([a-z ]+)</span> (\d+)", ul))


def test_overview_has_one_row_per_paper_linking_its_page_with_counts_figure_and_model(tmp_path) -> None:
    recs = run_suite([COIN, CRASH], profile="smoke", runs_dir=tmp_path / "runs")
    index = render_report(recs, EXPS, tmp_path / "report")
    html = index.read_text()
    assert html.count("<tbody><tr>") == 1 and html.count("</tr></tbody>") == 1  # one paper, one row
    assert "<a href='fake.html'><b>FAKE</b>" in html
    # smoke never judges: both claims of the coin are *not judged*, none folded into inconclusive; the crash is an
    # error (its claim not counted), the echo was not run
    assert _counts(html) == {"supported": "0", "not supported": "0", "inconclusive": "0", "not judged": "2",
                             "error": "1", "not run": "1"}
    assert "<img class=thumb src='plots/fake.coin/running_mean.png'" in html
    assert "none (no language model)" in html
    assert "(3 claims)" in html and "(1 claim)" in html  # the rules header counts claims per rule
    assert (tmp_path / "report" / "plots" / "fake.coin" / "running_mean.png").stat().st_size > 1000
    assert (tmp_path / "report" / "records" / "fake.coin.smoke.json").exists()


def test_paper_page_puts_claims_beside_plots_with_reasons_and_the_committed_full_verdict(tmp_path) -> None:
    full = run_suite([COIN], profile="full", runs_dir=tmp_path / "runs")
    save_summaries(full, EXPS, tmp_path / "results")
    recs = run_suite([COIN, CRASH], profile="smoke", runs_dir=tmp_path / "runs")
    render_report(recs, EXPS, tmp_path / "report", results_dir=tmp_path / "results")
    page = (tmp_path / "report" / "fake.html").read_text()
    coin = page[page.index("<h2 id='fake.coin'>"):page.index("<h2 id='fake.crash'>")]
    assert f"committed full record: commit <code>{full[0].git_commit}</code>, {full[0].started_at[:10]}" in coin
    assert "<div class='exp-body has-plots'>" in coin and "<img src='plots/fake.coin/running_mean.png'" in coin
    f1 = coin[coin.index("<b>F-1</b>"):coin.index("<b>F-2</b>")]
    this, committed = f1.split("</td><td>")[2:4]
    assert "not judged" in this and "observed</span>" in this and "smoke profile: never judged" in this
    assert "<span class='v supported'>supported</span>" in committed and full[0].metrics["mean"].fmt() in committed
    crash = page[page.index("<h2 id='fake.crash'>"):page.index("<h2 id='fake.echo'>")]
    assert "deliberate failure" in crash and "no committed full record" in crash
    echo = page[page.index("<h2 id='fake.echo'>"):]
    assert "<span class='v not_run'>not run</span>" in echo and "<b>E-1</b>" in echo
    assert "<a href='index.html'>← all papers</a>" in page
    assert _counts(page)["not judged"] == "2"


def test_a_not_judged_claim_shows_its_observed_value_and_an_inconclusive_one_its_reason(tmp_path) -> None:
    rec = RunRecord("fake.coin", "quick", {"n": 3}, metrics={"mean_observed": Estimate(0.51, 0.41, 0.61, n=30,
                                                                                        method="bootstrap"),
                                                             "n": Estimate(8, 7, 9, n=3, method="bootstrap")},
                    verdicts={"F-1": "not_judged", "F-2": "inconclusive"})
    rec.reasons = {"F-1": "quick runs the untrained tiny model"}  # type: ignore[attr-defined]
    render_report([rec], {"fake.coin": COIN}, tmp_path)
    page = (tmp_path / "fake.html").read_text()
    f1 = page[page.index("<b>F-1</b>"):page.index("<b>F-2</b>")]
    assert "observed</span> <span class=num>0.51 [0.41, 0.61]</span>" in f1
    assert "quick runs the untrained tiny model" in f1
    f2 = page[page.index("<b>F-2</b>"):]
    assert "<span class='v inconclusive'>inconclusive</span> <span class=num>8 [7, 9]</span>" in f2
    assert "the 95% CI reaches both sides of the threshold" in f2
    assert _counts((tmp_path / "index.html").read_text())["not judged"] == "1"


def test_model_column_names_the_setups_lm_specs_and_missing_metrics_say_why() -> None:
    from agentmill.report.render import missing_reason, model_label

    assert model_label(RunRecord("x", "full", {"n": 3}, model="hf:smollm2")) == "hf:smollm2"
    assert model_label(RunRecord("x", "full", {"n": 3, "counter": "smollm2"})) == "none"
    rec = RunRecord("x", "full", {"base": "hf:smollm2", "summariser": "hf:smollm2", "judge": "openai:m@http://h/v1",
                                  "styles": ["hf:not-a-spec-field"]})
    assert model_label(rec) == "hf:smollm2 (base, summariser); openai:m@http://h/v1 (judge)"
    assert missing_reason(RunRecord("x", "full", {})) == "missing"
    pre = "precondition not met: organism failed gate(s) ['G1']"
    assert missing_reason(RunRecord("x", "full", {}, data={"precondition": pre})) == "precondition not met"
    assert missing_reason(RunRecord("x", "full", {}, data={"precondition": "met"})) == "missing"
    assert missing_reason(RunRecord("x", "quick", {}, data={"plan_only": "quick plans only"})) == \
        "not measured (plan only)"


def test_a_verdict_is_escaped_in_its_class_attribute_too(tmp_path) -> None:
    """Records read from disk carry only known verdicts (``RunRecord.read``), but a record built in code reaches
    the page unchecked: the class attribute must not be a way out of the markup."""
    rec = RunRecord("fake.coin", "quick", {"n": 3}, metrics={"mean": Estimate.exact(0.5)},
                    verdicts={"F-1": "x'><script>alert(1)</script>"})
    render_report([rec], {"fake.coin": COIN}, tmp_path)
    html = (tmp_path / "fake.html").read_text()
    assert "<script>" not in html and "x&#x27;&gt;&lt;script&gt;" in html


def test_plots_drawn_by_forked_workers_equal_those_drawn_in_process(tmp_path) -> None:
    """The report draws plots on ``jobs`` forked processes; the pages and the PNG bytes do not depend on it, and a
    plot that raises is a note on its section either way, never a failed report."""
    import dataclasses

    def broken(data, out):
        raise RuntimeError("no axes today")

    coin2 = dataclasses.replace(COIN, id="fake.coin2")
    bad = dataclasses.replace(COIN, id="fake.badplot", plots=broken)
    exps = {e.id: e for e in (COIN, coin2, bad)}
    recs = run_suite(list(exps.values()), profile="smoke", runs_dir=tmp_path / "runs")
    pages = {}
    for jobs in (1, 2):
        out = tmp_path / f"report{jobs}"
        render_report(recs, exps, out, jobs=jobs)
        page = re.sub(r"Generated [^;]*;", "", (out / "fake.html").read_text())
        pngs = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "plots").rglob("*.png"))}
        pages[jobs] = (page, pngs)
    assert pages[1] == pages[2]
    page, pngs = pages[2]
    assert set(pngs) == {"plots/fake.coin/running_mean.png", "plots/fake.coin2/running_mean.png"}
    assert "plot error: no axes today" in page


def test_plot_workers_are_other_processes(tmp_path) -> None:
    import dataclasses
    import os

    def pid_plot(data, out):
        (out / "pid.txt").write_text(str(os.getpid()))
        return []

    exps = {f"fake.p{i}": dataclasses.replace(COIN, id=f"fake.p{i}", plots=pid_plot) for i in range(2)}
    recs = run_suite(list(exps.values()), profile="smoke", runs_dir=tmp_path / "runs")
    render_report(recs, exps, tmp_path / "two", jobs=2)
    render_report(recs, exps, tmp_path / "one", jobs=1)
    two = {int((tmp_path / "two" / "plots" / i / "pid.txt").read_text()) for i in exps}
    one = {int((tmp_path / "one" / "plots" / i / "pid.txt").read_text()) for i in exps}
    assert os.getpid() not in two and one == {os.getpid()}


def test_compositions_get_their_own_table_after_the_papers(tmp_path) -> None:
    """An experiment of a ``compose_<name>`` package is listed under "Compositions", not among the papers."""
    import dataclasses

    comp = dataclasses.replace(COIN, id="compose_fake.coin")
    recs = run_suite([COIN, comp], profile="smoke", runs_dir=tmp_path / "runs")
    html = render_report(recs, {COIN.id: COIN, comp.id: comp}, tmp_path / "report").read_text()
    papers, _, compositions = html.partition("<h2 id=compositions>Compositions</h2>")
    assert "<b>FAKE</b>" in papers and "<b>C-fake</b>" not in papers
    assert "<a href='compose_fake.html'><b>C-fake</b>" in compositions and "<b>FAKE</b>" not in compositions
    assert "of 1 papers and 1 compositions" in papers
    assert (tmp_path / "report" / "compose_fake.html").exists()
