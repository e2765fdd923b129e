from __future__ import annotations

import subprocess
import sys

import pytest

import agentmill.experiments as experiments
from agentmill.cli.main import main
from tests.helpers.fake_experiments import COIN, CRASH, ECHO


@pytest.fixture()
def fake_registry(monkeypatch):
    monkeypatch.setattr(experiments, "_registry", {e.id: e for e in (COIN, CRASH, ECHO)})


def test_list_shows_claims(fake_registry, capsys, tmp_path) -> None:
    assert main(["list", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fake.coin" in out and "F-1" in out and "fake.crash" in out


def test_run_prints_verdicts_and_writes_record(fake_registry, capsys, tmp_path) -> None:
    assert main(["run", "fake.coin", "--profile", "quick", "--runs-dir", str(tmp_path), "--set", "n=300"]) == 0
    out = capsys.readouterr().out
    assert "F-1" in out and "supported" in out
    assert (tmp_path / "quick" / "fake.coin.json").exists()


@pytest.mark.parametrize("argv,needle", [
    (["run", "fake.con"], "Did you mean 'fake.coin'"),
    (["run", "fake.coin", "--set", "nn=3"], "Did you mean 'n'"),
    (["run", "fake.coin", "--set", "n"], "--set expects key=value"),
    (["run", "fake.coin", "--set", "n=abc"], "cannot parse"),
    (["run", "fake.echo", "--model", "hf"], "not of the form <backend>:<name>"),
    (["run", "fake.echo", "--model", "opnai:x@http://127.0.0.1:1"], "Did you mean 'openai:"),
])
def test_bad_input_exits_2_with_one_clear_message(fake_registry, capsys, tmp_path, argv, needle) -> None:
    assert main(argv + ["--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not list(tmp_path.rglob("*.json"))


def test_failing_experiment_exits_1(fake_registry, capsys, tmp_path) -> None:
    assert main(["run", "fake.crash", "--runs-dir", str(tmp_path)]) == 1
    assert "deliberate failure" in capsys.readouterr().out


def test_reproduce_runs_all_reports_errors_and_renders(fake_registry, capsys, tmp_path) -> None:
    rc = main(["reproduce", "--profile", "smoke", "--model", "scripted:echo", "--runs-dir", str(tmp_path / "runs"),
               "--report-dir", str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert rc == 1 and "fake.crash" in out  # one crash -> non-zero, but the others ran
    html = (tmp_path / "report" / "index.html").read_text()
    assert "deliberate failure" in html and "F-1" in html and "E-1" in html
    assert (tmp_path / "runs" / "smoke" / "fake.coin.json").exists()


def test_console_script_lists_real_experiments() -> None:
    exe = [sys.executable, "-m", "agentmill.cli.main", "list"]
    out = subprocess.run(exe, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "e162.collapse_law" in out.stdout and "E162-R2a" in out.stdout


def test_unloadable_model_is_bad_input_for_run_and_an_error_row_for_reproduce(fake_registry, capsys,
                                                                                tmp_path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf")
    assert main(["run", "fake.echo", "--model", f"hf:{bad}", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "broken.gguf" in err and "corrupt or truncated" in err and "Traceback" not in err
    assert not list((tmp_path / "runs").rglob("*.json"))
    rc = main(["reproduce", "--only", "fake.echo", "fake.coin", "--model", f"hf:{bad}", "--runs-dir",
               str(tmp_path / "runs"), "--report-dir", str(tmp_path / "report")])
    assert rc == 1
    html = (tmp_path / "report" / "index.html").read_text()
    assert "corrupt or truncated" in html and "F-1" in html
