"""``agentmill bayes-ship``: synth → calibrate → replay → regime-map → explain, and bad input exits 2."""

from __future__ import annotations

import json

from agentmill.cli.main import main

COST = "R=100,c_ver=30,c_gen=5,L0=1,L2=2,L3=3,L4=2"


def test_pipeline(tmp_path, capsys) -> None:
    cand, cal = tmp_path / "c.jsonl", tmp_path / "cal.json"
    assert main(["bayes-ship", "synth", "--world", "W-C", "--n", "40", "--out", str(cand)]) == 0
    assert main(["bayes-ship", "calibrate", "--records", str(cand), "--out", str(cal)]) == 0
    assert json.loads(cal.read_text())["schema"] == "agentmill.bayes_ship.calibration/1"
    assert main(["bayes-ship", "replay", "--records", str(cand), "--calib", str(cal), "--cost", COST,
                 "--n-boot", "100"]) == 0
    out = capsys.readouterr().out
    assert "bayes_dp" in out and "gate(L2)" in out
    assert main(["bayes-ship", "regime-map", "--calib", str(cal), "--cost", "R=100,c_gen=5,L0=1,L2=2,L3=3,L4=2",
                 "--c-ver", "5:60:3", "--html", str(tmp_path / "m.html")]) == 0
    assert "regime" in capsys.readouterr().out and (tmp_path / "m.html").exists()
    assert main(["bayes-ship", "explain", "--calib", str(cal), "--belief", "0.3", "--used", "L0", "--cost",
                 COST]) == 0
    assert "θ=c_ver/R=0.3" in capsys.readouterr().out


def test_bad_input_exits_2(tmp_path, capsys) -> None:
    assert main(["bayes-ship", "calibrate", "--records", str(tmp_path / "none.jsonl"), "--out",
                 str(tmp_path / "c.json")]) == 2
    cand, cal = tmp_path / "c.jsonl", tmp_path / "cal.json"
    main(["bayes-ship", "synth", "--n", "5", "--out", str(cand)])
    main(["bayes-ship", "calibrate", "--records", str(cand), "--out", str(cal)])
    assert main(["bayes-ship", "explain", "--calib", str(cal), "--belief", "1.5"]) == 2
    assert main(["bayes-ship", "explain", "--calib", str(cal), "--belief", "0.5", "--used", "L9"]) == 2
    assert main(["bayes-ship", "replay", "--records", str(cand), "--cost", "R=abc"]) == 2
    assert "not a number" in capsys.readouterr().err
