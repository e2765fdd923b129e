"""``agentmill cliff``: real commands through ``main``."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_test_and_table(capsys) -> None:
    assert main(["cliff", "test", "--k-prev", "32", "--k-curr", "16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cliff"] is True and abs(out["drop"] - 0.25) < 1e-12
    assert main(["cliff", "test", "--k-prev", "32", "--k-curr", "17"]) == 0
    assert json.loads(capsys.readouterr().out)["cliff"] is False
    assert main(["cliff", "table", "--n", "64"]) == 0
    assert "1283 cliff cells" in capsys.readouterr().out


def test_scan_then_detect(tmp_path, capsys) -> None:
    out = tmp_path / "scans.jsonl"
    assert main(["cliff", "scan", "--n-problems", "6", "--n", "64", "--seed", "1", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[0])["schema"] == "agentmill.cliffscan/1"
    capsys.readouterr()
    assert main(["cliff", "detect", "--in", str(out)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 6


def test_detect_missing_file_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["cliff", "detect", "--in", str(tmp_path / "nope.jsonl")]) == 2
    assert "agentmill cliff scan" in capsys.readouterr().err
