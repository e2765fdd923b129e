"""``agentmill forensics``: real commands through ``main``; bad input exits 2 naming the line."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_register_verify_and_tamper(tmp_path, capsys) -> None:
    reg = tmp_path / "reg"
    assert main(["forensics", "register", "--registry", str(reg), "--id", "H_self", "--motive", "self_consistency",
                 "--category", "malign", "--predict", "actor=developer:-1", "--positive-control",
                 "appeal=asks_to_report", "--env", "loyalty", "--freeze"]) == 0
    assert main(["forensics", "verify", str(reg)]) == 0
    assert "1 frozen" in capsys.readouterr().out
    path = reg / "ledger.jsonl"
    path.write_text(path.read_text().replace("self_consistency", "tedium", 1))
    assert main(["forensics", "verify", str(reg)]) == 2
    assert "line 1 does not verify" in capsys.readouterr().err


def test_replay_and_its_refusals(tmp_path, capsys) -> None:
    out = tmp_path / "rp"
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=developer", "--out", str(out)]) == 0
    shown = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert shown["documents_changed"] == ["notes"] and shown["rewind_step"] == 2
    assert main(["forensics", "verify", str(out / "original.jsonl"), "--replayed", str(out / "replayed.jsonl")]) == 0
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=developer", "--rewind", "3"]) == 2
    assert "first exposed at step 2" in capsys.readouterr().err
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=developer", "--set", "motive=save_time"]) == 2
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=nobody"]) == 2


def test_sweep_prints_the_threshold(tmp_path, capsys) -> None:
    assert main(["forensics", "sweep", "tedium", "--variable", "n_errors", "--n", "40", "--bootstrap", "200",
                 "--plot", str(tmp_path / "d.png")]) == 0
    out = capsys.readouterr().out
    assert "d50 =" in out and (tmp_path / "d.png").exists()
    assert main(["forensics", "sweep", "tedium", "--variable", "deadline"]) == 2
