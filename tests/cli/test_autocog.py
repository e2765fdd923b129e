from __future__ import annotations

from agentmill.cli.main import main


def test_run_audit_leaderboard(tmp_path, capsys) -> None:
    d = tmp_path / "run"
    assert main(["autocog", "run", "--run-dir", str(d), "--rounds", "1", "--n-designs", "4",
                 "--max-candidates", "12", "--gt", "tallying", "--eps", "0.0"]) == 0
    out = capsys.readouterr().out
    assert "status done" in out and "surfaced:" in out
    assert main(["autocog", "audit", str(d)]) == 0
    assert main(["autocog", "leaderboard", str(d)]) == 0
    assert main(["autocog", "status", str(d)]) == 0
    # tamper with one ledger line -> audit fails
    lines = (d / "ledger.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"round_started"', '"round_startex"')
    (d / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["autocog", "audit", str(d)]) == 1


def test_bad_input_exits_2(tmp_path, capsys) -> None:
    assert main(["autocog", "run", "--run-dir", str(tmp_path / "x"), "--roles", "llm"]) == 2
    assert "--roles search" in capsys.readouterr().err
    assert main(["autocog", "run", "--run-dir", str(tmp_path / "y"), "--gt", "nope"]) == 2
    assert main(["autocog", "resume", str(tmp_path / "none")]) == 2


def test_battery_check_and_sandbox_check(capsys) -> None:
    assert main(["autocog", "battery", "check"]) == 0
    out = capsys.readouterr().out
    assert "R=1" in out and "passed" in out
    assert main(["autocog", "sandbox-check"]) == 0
    assert "audit_hook" in capsys.readouterr().out


def test_sandbox_commands_without_bubblewrap_are_one_line(tmp_path) -> None:
    """No bwrap on PATH: the sandbox refuses (it does not fall back quietly) and the CLI says how to install it."""
    import subprocess
    import sys
    from pathlib import Path

    bindir = tmp_path / "bin"
    bindir.mkdir()
    env = {"PATH": str(bindir), "HOME": str(tmp_path)}
    p = subprocess.run([str(Path(sys.executable).with_name("agentmill")), "autocog", "sandbox-check"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "apt-get install bubblewrap" in p.stderr
    env["AGENTMILL_SANDBOX"] = "python-only"
    p = subprocess.run([str(Path(sys.executable).with_name("agentmill")), "autocog", "sandbox-check"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and "isolation                    python-only" in p.stdout
