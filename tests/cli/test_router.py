"""agentmill router record / train / eval / route on a small solver-only table, and its input errors."""

from __future__ import annotations

import json

import pytest

from agentmill.cli.main import main


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_record_train_eval_route(tmp_path, capsys) -> None:
    table = tmp_path / "t.jsonl"
    workers = "solver:arith,solver:string,solver:date,solver:unit,solver:lookup"
    assert main(["router", "record", "--workers", workers, "--out", str(table), "--per-template", "6"]) == 0
    rec = _last_json(capsys.readouterr().out)
    assert rec["cells"] == 1800
    assert main(["router", "train", "--table", str(table), "--es-generations", "0", "--out",
                 str(tmp_path / "r.json")]) == 0
    tr = _last_json(capsys.readouterr().out)
    assert tr["val_acc"] > 0.4 and tr["lambda"] == 0.0
    assert main(["router", "eval", "--router", str(tmp_path / "r.json"), "--table", str(table)]) == 0
    ev = _last_json(capsys.readouterr().out)
    assert ev["n"] == 72 and ev["router_acc"] > ev["best_single_acc"]
    assert main(["router", "route", "Reverse the word 'garden'.", "--router", str(tmp_path / "r.json")]) == 0
    assert _last_json(capsys.readouterr().out)["worker"] == "solver:string"
    assert main(["router", "route", "Reverse the word 'garden'.", "--router", str(tmp_path / "r.json"),
                 "--deny", "solver:string"]) == 0
    d = _last_json(capsys.readouterr().out)
    assert d["worker"] != "solver:string" and d["fallback"]


def test_bad_inputs_exit_2(tmp_path, capsys) -> None:
    assert main(["router", "train", "--table", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "r")]) == 2
    assert main(["router", "record", "--workers", "solver:nope", "--out", str(tmp_path / "t.jsonl"),
                 "--per-template", "1"]) == 2
    assert main(["router", "record", "--workers", "solver:arith,solver:arith", "--out", str(tmp_path / "u.jsonl"),
                 "--per-template", "1"]) == 2
    table = tmp_path / "v.jsonl"
    assert main(["router", "record", "--workers", "solver:arith,solver:string", "--out", str(table),
                 "--per-template", "1"]) == 0
    assert main(["router", "train", "--table", str(table), "--lambda", "0.3", "--out", str(tmp_path / "r")]) == 2
    assert "grid" in capsys.readouterr().err
