"""The published verdict tables (README block, docs/verdicts.md) rendered from result summaries, and ``--check``."""

from __future__ import annotations

import json

import pytest

import agentmill.experiments as experiments
from agentmill.cli.main import main
from agentmill.experiments.runner import run_suite
from agentmill.report.markdown import BEGIN, END, render_tables, splice, write_tables
from agentmill.report.results import save_summaries
from tests.helpers.fake_experiments import COIN, CRASH, ECHO

EXPS = {e.id: e for e in (COIN, CRASH, ECHO)}


def _summaries(tmp_path, profile="quick"):
    recs = run_suite([COIN, CRASH], profile=profile, runs_dir=tmp_path / "runs")
    save_summaries(recs, EXPS, tmp_path / "results")
    return recs


def test_readme_block_counts_each_verdict_apart_with_errors_and_missing_records(tmp_path) -> None:
    _summaries(tmp_path)
    path = tmp_path / "results" / "quick" / "fake.coin.json"
    d = json.loads(path.read_text())
    d["claims"][1].update(verdict="not_judged", reason="quick plans only")  # never counted as inconclusive
    path.write_text(json.dumps(d))
    block = render_tables(EXPS, tmp_path / "results").readme_block
    assert block.startswith(BEGIN) and block.endswith(END)
    row = next(line for line in block.splitlines() if line.startswith("| [FAKE]"))
    assert row == ("| [FAKE](docs/verdicts.md#fake) none | 3 | 1 · 0 · 0 · 1 (1 error; 1 of 3 experiments without a "
                   "record) | no committed record |")
    assert "supported · not supported · inconclusive · not judged" in block
    assert "[docs/verdicts.md](docs/verdicts.md)" in block


def test_verdicts_doc_has_a_row_per_claim_with_quick_and_full_and_provenance(tmp_path) -> None:
    recs = _summaries(tmp_path)
    _summaries(tmp_path, "full")
    (tmp_path / "results" / "full" / "fake.crash.json").unlink()
    doc = render_tables(EXPS, tmp_path / "results").verdicts_doc
    rows = {line.split("**")[1]: line.split(" | ") for line in doc.splitlines() if line.startswith("| **")}
    assert set(rows) == {"F-1", "F-2", "X-1", "E-1"}
    f1 = rows["F-1"]
    assert f1[1] == "a fair coin lands heads about half the time" and f1[2] == "`mean` ∈ [0.3, 0.7] (CI rule)"
    assert f1[3] == f"{recs[0].metrics['mean'].fmt()}, n=200 **supported**"
    assert f1[4].endswith("**supported**") and f1[5] == "none"
    assert f1[6] == f"quick `{recs[0].git_commit}` {recs[0].started_at[:10]}<br>full `{recs[0].git_commit}` " \
                    f"{recs[0].started_at[:10]} |"
    assert rows["X-1"][3] == "error (below)" and rows["X-1"][4] == "no committed full record"
    assert rows["E-1"][3] == "no committed record" and rows["E-1"][4] == "no committed full record"
    assert f"- `fake.crash` (quick, commit `{recs[1].git_commit}`, {recs[1].started_at[:10]}): RuntimeError: " \
           f"deliberate failure for the test" in doc
    assert "- **CI rule** (3 claims)" in doc and "- **exact** (1 claim)" in doc


def test_a_not_judged_claim_shows_reason_and_observed_value_and_cells_are_escaped(tmp_path) -> None:
    _summaries(tmp_path)
    path = tmp_path / "results" / "quick" / "fake.coin.json"
    d = json.loads(path.read_text())
    d["claims"][0].update(verdict="not_judged", reason="stand-in | <b>model</b> *untrained*")
    d["claims"][1].update(verdict="inconclusive", reason="interval spans 10", threshold="≥ 5")
    path.write_text(json.dumps(d))
    doc = render_tables(EXPS, tmp_path / "results").verdicts_doc
    f1 = next(line for line in doc.splitlines() if line.startswith("| **F-1**"))
    assert "not judged: stand-in \\| &lt;b>model&lt;/b> \\*untrained\\*; observed 0.44 [" in f1
    f2 = next(line for line in doc.splitlines() if line.startswith("| **F-2**"))
    assert "200 **inconclusive**: interval spans 10 (judged against ≥ 5)" in f2


def test_empty_results_render_no_committed_record_everywhere(tmp_path) -> None:
    tables = render_tables(EXPS, tmp_path / "nothing")
    assert "| 3 | no committed record | no committed record |" in tables.readme_block
    assert tables.verdicts_doc.count("no committed full record") == 4


def test_splice_replaces_only_the_marked_block() -> None:
    text = f"intro\n{BEGIN}\nold table\n{END}\noutro\n"
    assert splice(text, f"{BEGIN}\nnew\n{END}") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ValueError, match="no '<!-- verdicts:begin -->'"):
        splice("no markers", "x", where="R.md")


def test_write_tables_writes_then_check_finds_nothing_until_a_file_drifts(tmp_path) -> None:
    _summaries(tmp_path)
    readme, doc = tmp_path / "README.md", tmp_path / "docs" / "verdicts.md"
    readme.write_text(f"# x\n\n{BEGIN}\n{END}\n\nafter\n")
    assert write_tables(EXPS, tmp_path / "results", readme, doc, check=True) == [readme, doc]
    assert not doc.exists()  # check writes nothing
    assert write_tables(EXPS, tmp_path / "results", readme, doc) == [readme, doc]
    assert write_tables(EXPS, tmp_path / "results", readme, doc, check=True) == []
    assert readme.read_text().endswith(f"{END}\n\nafter\n") and "](docs/verdicts.md#fake)" in readme.read_text()
    (tmp_path / "results" / "quick" / "fake.coin.json").unlink()  # a result changes -> the tables are stale
    assert write_tables(EXPS, tmp_path / "results", readme, doc, check=True) == [readme, doc]


def test_cli_save_results_markdown_and_check(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(experiments, "_registry", dict(EXPS))
    runs, results = tmp_path / "runs", tmp_path / "results"
    readme, doc = tmp_path / "README.md", tmp_path / "docs" / "verdicts.md"
    readme.write_text(f"{BEGIN}\n{END}\n")
    assert main(["run", "fake.coin", "--runs-dir", str(runs)]) == 0
    assert main(["report", "--save-results", "--runs-dir", str(runs), "--results-dir", str(results)]) == 0
    assert "wrote 1 result summaries" in capsys.readouterr().out
    assert [p.name for p in (results / "quick").iterdir()] == ["fake.coin.json"]
    md = ["report", "--markdown", "--results-dir", str(results), "--readme", str(readme), "--verdicts-doc", str(doc)]
    assert main(md + ["--check"]) == 1
    assert str(readme) in capsys.readouterr().out
    assert main(md) == 0 and main(md + ["--check"]) == 0
    doc.write_text(doc.read_text().replace("supported", "supported!", 1))
    assert main(md + ["--check"]) == 1
    out = capsys.readouterr().out
    assert str(doc) in out and "agentmill report --markdown" in out
    assert main(["report", "--check"]) == 2
    assert "--check goes with --markdown" in capsys.readouterr().err


def test_cli_save_results_leaves_out_a_record_the_current_code_would_not_store(monkeypatch, capsys, tmp_path) -> None:
    """A trimmed setup (or a new experiment version) makes a stored record stale: it is not published until rerun."""
    import dataclasses

    monkeypatch.setattr(experiments, "_registry", dict(EXPS))
    runs, results = tmp_path / "runs", tmp_path / "results"
    assert main(["run", "fake.coin", "--runs-dir", str(runs)]) == 0
    trimmed = dataclasses.replace(COIN, setups={**COIN.setups,
                                                "quick": dataclasses.replace(COIN.setups["quick"], n=7)})
    monkeypatch.setattr(experiments, "_registry", {**EXPS, COIN.id: trimmed})
    assert main(["report", "--save-results", "--runs-dir", str(runs), "--results-dir", str(results)]) == 0
    out = capsys.readouterr().out
    assert "1 record(s) are stale" in out and "fake.coin" in out and "wrote 0 result summaries" in out
    assert not (results / "quick").exists()
    monkeypatch.setattr(experiments, "_registry", {**EXPS, COIN.id: dataclasses.replace(COIN, version="2")})
    assert main(["report", "--save-results", "--runs-dir", str(runs), "--results-dir", str(results)]) == 0
    assert "1 record(s) are stale" in capsys.readouterr().out
    monkeypatch.setattr(experiments, "_registry", dict(EXPS))  # the code the record ran on: published
    assert main(["report", "--save-results", "--runs-dir", str(runs), "--results-dir", str(results)]) == 0
    assert "wrote 1 result summaries" in capsys.readouterr().out


def test_a_claim_rerun_on_another_model_is_published_beside_the_registered_models_row(tmp_path) -> None:
    """A run on a non-default ``--model`` is saved as ``<id>@<model>.json`` and shown under the default's row; it
    never overwrites the registered model's summary, and README's counts stay the registered model's."""
    from agentmill.experiments.runner import run_experiment
    from agentmill.report.results import load_summaries, load_variants

    results = tmp_path / "results"
    default = _summaries(tmp_path, "full")  # COIN and CRASH on their registered setups
    echo = run_experiment(ECHO, profile="full", model="scripted:echo", runs_dir=tmp_path / "runs")
    written = save_summaries([echo], EXPS, results)
    assert [p.name for p in written] == ["fake.echo@echo.json"]
    saved = json.loads(written[0].read_text())
    assert saved["variant"] == "echo" and saved["model"] == "scripted:echo"
    assert "fake.echo" not in load_summaries(results, "full")  # the registered model has no record
    assert list(load_variants(results, "full")) == ["fake.echo"]
    doc = render_tables(EXPS, results).verdicts_doc
    rows = [line for line in doc.splitlines() if line.startswith("| **E-1**")]
    assert len(rows) == 2 and rows[0].split(" | ")[4] == "no committed full record"
    variant = rows[1].split(" | ")
    assert variant[0] == "| **E-1** on `echo`<br>`fake.echo`" and variant[4].startswith("1 **")
    assert variant[3] == "not run on this model" and variant[5] == "scripted:echo"
    assert "fake.echo@" not in render_tables(EXPS, results).readme_block
    # a registered-model run of the same experiment keeps its own file: neither replaces the other
    assert not (results / "full" / "fake.echo.json").exists() and default
    # a file whose name disagrees with its variant is refused, naming the file
    bad = results / "full" / "fake.echo@other.json"
    bad.write_text(written[0].read_text())
    with pytest.raises(Exception, match="fake.echo@other"):
        load_variants(results, "full")


def test_cli_save_results_publishes_a_set_model_variant_against_its_own_setup(monkeypatch, capsys, tmp_path) -> None:
    """A run with ``--set lm=<another model>`` is checked against the setup it ran with and published beside the
    registered row (``<id>@<model>.json``); a version change still makes it stale."""
    import dataclasses
    from dataclasses import dataclass

    from agentmill.core.stats import Estimate
    from agentmill.experiments.protocol import Claim, Experiment

    @dataclass(frozen=True)
    class S:
        lm: str = ""
        n: int = 3

    exp = Experiment(id="fake.lmx", title="t", paper="none", scale_note="-",
                     claims=(Claim("X-1", "s", "src", "1", "m", ">=", 0.0),),
                     setups={"smoke": S(), "quick": S(), "full": S()},
                     measure=lambda s, c: {"m": Estimate.exact(float(len(s.lm)), n=s.n)})
    monkeypatch.setattr(experiments, "_registry", {exp.id: exp})
    runs, results = tmp_path / "runs", tmp_path / "results"
    assert main(["run", exp.id, "--runs-dir", str(runs), "--set", "lm=openai:other-model@http://127.0.0.1:9/v1"]) == 0
    monkeypatch.setattr(experiments, "_registry", {exp.id: dataclasses.replace(exp, version="2")})
    assert main(["report", "--save-results", "--runs-dir", str(runs), "--results-dir", str(results)]) == 0
    assert "1 record(s) are stale" in capsys.readouterr().out
    monkeypatch.setattr(experiments, "_registry", {exp.id: exp})
    assert main(["report", "--save-results", "--runs-dir", str(runs), "--results-dir", str(results)]) == 0
    assert "wrote 1 result summaries" in capsys.readouterr().out
    assert [p.name for p in (results / "quick").iterdir()] == ["fake.lmx@other-model.json"]
