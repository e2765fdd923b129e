"""``agentmill metis``: run, inspect, export-skills, sandbox-check."""

from __future__ import annotations

import pytest

from agentmill.cli.main import main


@pytest.fixture(autouse=True)
def _mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmill.core import bubblewrap

    if bubblewrap.probe() is not None:
        monkeypatch.setenv(bubblewrap.ENV_MODE, "python-only")


def test_run_inspect_export(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["metis", "run", "--mode", "metis", "--tasks", "40", "--shift", "20", "--out", str(out)]) == 0
    assert (out / "ledger.jsonl").exists() and (out / "snapshot.json").exists() and (out / "tasks.jsonl").exists()
    assert main(["metis", "inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ledger intact: True; replay equals snapshot: True" in text
    assert main(["metis", "export-skills", str(out), "--to", str(tmp_path / "skills")]) == 0
    assert list((tmp_path / "skills").glob("*/SKILL.md"))
    assert main(["metis", "run", "--tasks", "10", "--shift", "5", "--out", str(out)]) == 2  # not empty


def test_bad_input_exits_2(tmp_path, capsys) -> None:
    assert main(["metis", "run", "--tasks", "10", "--shift", "20", "--out", str(tmp_path / "x")]) == 2
    assert "shorter than t_shift" in capsys.readouterr().err
    assert main(["metis", "run", "--k", "0", "--out", str(tmp_path / "y")]) == 2
    assert main(["metis", "inspect", str(tmp_path)]) == 2


def test_sandbox_check_prints_layers(capsys) -> None:
    assert main(["metis", "sandbox-check"]) == 0
    out = capsys.readouterr().out
    assert "round trip through the broker: ok" in out and "seccomp" in out and "isolation" in out
