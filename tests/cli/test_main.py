from __future__ import annotations

import json
import subprocess
import sys

import pytest

import agentmill.experiments as experiments
from agentmill.cli.main import main
from agentmill.core.records import RunRecord
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
    html = (tmp_path / "report" / "fake.html").read_text()  # the fake experiments' paper page
    assert "deliberate failure" in html and "F-1" in html and "E-1" in html
    assert "<a href='fake.html'>" in (tmp_path / "report" / "index.html").read_text()
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
    html = (tmp_path / "report" / "fake.html").read_text()
    assert "corrupt or truncated" in html and "F-1" in html


# -- hostile input (issue 20) ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("how,field", [("metrics=null", "field metrics"), ("verdicts=[]", "field verdicts"),
                                       ('wall_seconds="fast"', "field wall_seconds"),
                                       ("directory", "(whole file)")])
@pytest.mark.parametrize("command", ["list", "report", "run", "run --fresh", "reproduce"])
def test_one_malformed_record_jams_nothing(fake_registry, capsys, tmp_path, how, field, command) -> None:
    """Each command over a wrong-typed record (or a directory in its place) crashed with a traceback; now one line
    names the file and the field, the file goes to history/, and the experiment counts as not run."""
    runs, report = tmp_path / "runs", tmp_path / "report"
    assert main(["run", "fake.coin", "--profile", "smoke", "--runs-dir", str(runs)]) == 0
    path = runs / "smoke" / "fake.coin.json"
    if how == "directory":
        path.unlink()
        path.mkdir()
    else:
        key, value = how.split("=", 1)
        d = json.loads(path.read_text())
        d[key] = json.loads(value)
        path.write_text(json.dumps(d))
    capsys.readouterr()
    argv = {"list": ["list"], "report": ["report", "--report-dir", str(report)], "run": ["run", "fake.coin"],
            "run --fresh": ["run", "fake.coin", "--fresh"],
            "reproduce": ["reproduce", "--only", "fake.coin", "--report-dir", str(report)]}[command]
    assert main(argv + ["--profile", "smoke", "--runs-dir", str(runs)]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and str(path) in err and field in err and "Traceback" not in err
    assert len(list((runs / "smoke" / "history").glob("fake.coin.malformed-*.json"))) == 1
    if command in ("list", "report"):
        assert not path.exists()  # counts as not run
        if command == "report":
            page = (report / "fake.html").read_text()
            assert "A fair coin</h2><div class=meta><span class='v not_run'>not run</span>" in page
    else:  # run again, result stored
        assert RunRecord.read(path).status == "ok" and "F-1" in out


def test_a_file_in_the_runs_or_report_dirs_place_is_one_line_and_exit_1(fake_registry, capsys, tmp_path) -> None:
    """Disk errors (here a file where a directory must go, which fails the same for root and users) print the
    path and the OS error on one line, not a 15-36 line traceback."""
    (tmp_path / "runs").write_text("x")
    assert main(["run", "fake.coin", "--runs-dir", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "runs") in err and "Not a directory" in err
    (tmp_path / "report").write_text("x")
    for argv in (["reproduce", "--only", "fake.coin", "--runs-dir", str(tmp_path / "ok")],
                 ["report", "--runs-dir", str(tmp_path / "ok")]):
        assert main(argv + ["--profile", "smoke", "--report-dir", str(tmp_path / "report")]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(tmp_path / "report") in err and "Traceback" not in err
    assert (tmp_path / "ok" / "smoke" / "fake.coin.json").exists()  # the records were written before the report


@pytest.mark.parametrize("argv", [["run", "fake.echo", "--model", ""], ["run", "fake.coin", "--model", "  "],
                                  ["reproduce", "--model", ""],
                                  ["run", "fake.coin", "--ray-address", "127.0.0.1:6379"],
                                  ["reproduce", "--ray-address", "auto", "--executor", "process"],
                                  ["run", "fake.coin", "--executor", "ray", "--ray-address", " "]])
def test_empty_model_and_misplaced_ray_address_are_usage_errors(fake_registry, capsys, tmp_path, argv) -> None:
    """``--model ""`` silently ran the default model; now it is bad input (exit 2, one line), as is
    ``--ray-address`` without ``--executor ray``."""
    assert main(argv + ["--runs-dir", str(tmp_path), "--report-dir", str(tmp_path / "report")]
                if argv[0] == "reproduce" else argv + ["--runs-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("agentmill: error: --") and not out
    assert not list(tmp_path.rglob("*.json"))


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
def test_workers_of_jobs_die_with_a_killed_reproduce(tmp_path) -> None:
    """``kill -9`` of ``reproduce --jobs 2`` left both workers and the multiprocessing resource tracker running
    (they wrote more records and then hung holding ~0.8 GB). Kill the CLI once both workers exist; every process
    it started must be gone within a few seconds."""
    import signal
    import time

    import psutil

    ids = ["e165.g2po_value_variance", "e173.progress_reward_vs_advantage", "e179.counterexample",
           "e162.greedy_submodular"]
    cmd = [sys.executable, "-m", "agentmill.cli.main", "reproduce", "--profile", "smoke", "--jobs", "2", "--only",
           *ids, "--runs-dir", str(tmp_path / "runs"), "--report-dir", str(tmp_path / "report")]
    parent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: list = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            procs = _descendants(parent.pid)
            workers = [p for p in procs if "spawn_main" in " ".join(_cmdline(p))]
            if len(workers) == 2:
                break
            assert parent.poll() is None, "the suite ended before both workers were seen"
            time.sleep(0.02)
        else:
            pytest.fail("no two workers within 120 s")
        time.sleep(0.5)  # let the workers reach their initializer (a kill before it is caught by getppid too)
        procs = _descendants(parent.pid)
        assert any("resource_tracker" in " ".join(_cmdline(p)) for p in procs)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        gone, alive = psutil.wait_procs(procs, timeout=10)
        alive = [p for p in alive if _status(p) != psutil.STATUS_ZOMBIE]
        assert not alive, [(p.pid, _cmdline(p)) for p in alive]
    finally:
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if parent.poll() is None:
            parent.kill()


def _cmdline(p) -> list[str]:
    import psutil

    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def _status(p) -> str:
    import psutil

    try:
        return p.status()
    except psutil.NoSuchProcess:
        return psutil.STATUS_DEAD


def test_list_shows_each_quick_budget(monkeypatch, capsys, tmp_path) -> None:
    import dataclasses

    budgeted = dataclasses.replace(COIN, quick_budget_s=45.0)
    monkeypatch.setattr(experiments, "_registry", {e.id: e for e in (budgeted, ECHO)})
    assert main(["list", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "quick budget" in out and "45 s" in out


def test_list_marks_a_quick_pipeline_check(monkeypatch, capsys, tmp_path) -> None:
    import dataclasses

    outs = []
    for exp in (dataclasses.replace(COIN, quick_budget_s=45.0),
                dataclasses.replace(COIN, quick_budget_s=45.0, quick_check="quick is a pipeline check")):
        monkeypatch.setattr(experiments, "_registry", {exp.id: exp})
        assert main(["list", "--runs-dir", str(tmp_path)]) == 0
        outs.append(" ".join(capsys.readouterr().out.replace("│", " ").split()))
    assert outs[1].count("check only") == outs[0].count("check only") + 1  # the cell, beside the caption's legend


@pytest.mark.parametrize("profile,seconds,budget,warned", [
    ("quick", 91.0, 45.0, True), ("quick", 90.0, 45.0, False), ("quick", 500.0, None, False),
    ("full", 500.0, 45.0, False),
])
def test_a_quick_run_over_twice_its_budget_is_reported(capsys, profile, seconds, budget, warned) -> None:
    import dataclasses

    from agentmill.experiments.runner import over_budget

    exp = dataclasses.replace(COIN, quick_budget_s=budget)
    rec = RunRecord(experiment_id=COIN.id, profile=profile, setup={}, wall_seconds=seconds)
    assert over_budget(exp, rec) is warned
    err = capsys.readouterr().err
    assert (f"{COIN.id} took {seconds:.0f} s at quick" in err) is warned


def test_a_record_prints_not_judged_with_its_reason_and_observed_value_and_inconclusive_with_why() -> None:
    """Issue 24: a claim withheld on purpose reads "not judged — <reason>" beside the observed number, never
    "missing … inconclusive"; an inconclusive claim says why; a record written before reasons existed still prints."""
    import dataclasses
    import io

    from rich.console import Console

    from agentmill.cli.main import _print_record
    from agentmill.core.stats import Estimate

    buf = io.StringIO()
    console = Console(file=buf, width=250, highlight=False)
    rec = RunRecord(experiment_id=COIN.id, profile="quick", setup={},
                    metrics={"mean_observed": Estimate(0.52, 0.45, 0.6, n=200, method="bootstrap"),
                             "n": Estimate.exact(1.0)},
                    verdicts={"F-1": "not_judged", "F-2": "not_supported"},
                    reasons={"F-1": "tiny stand-in model: verdicts need hf:smollm2 (full)"})
    _print_record(console, COIN, rec)
    lines = buf.getvalue().splitlines()
    f1 = next(x for x in lines if "F-1" in x)
    assert "0.52 [0.45, 0.6] (observed)" in f1 and "not judged — tiny stand-in model: verdicts need hf:smollm2" in f1
    assert "missing" not in f1 and "inconclusive" not in f1
    assert "—" not in next(x for x in lines if "F-2" in x)  # a clear verdict carries no reason
    buf.truncate(0)
    _print_record(console, COIN, dataclasses.replace(rec, metrics={"mean": Estimate.exact(0.5)},
                                                     verdicts={"F-1": "inconclusive", "F-2": "inconclusive"},
                                                     reasons={"F-1": "zero-width interval: [x] all agree"}))
    out = buf.getvalue()
    assert "inconclusive — zero-width interval: [x] all agree" in out  # markup in a reason is printed, not parsed
    buf.truncate(0)
    _print_record(console, COIN, dataclasses.replace(rec, reasons={}))  # an old record: no reasons, no crash
    assert "not judged" in buf.getvalue()
