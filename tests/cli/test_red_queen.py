"""``agentmill red-queen``: run, audit, world-check, and clear errors."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_run_then_audit(tmp_path, capsys) -> None:
    out = tmp_path / "rq"
    assert main(["red-queen", "run", "--budget", "32", "--seed", "0", "--out", str(out)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["bias_R_incumbent"] > 1.7 and (out / "state.json").exists()
    assert main(["red-queen", "audit", str(out)]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["replay_equals_snapshot"] and rep["stale_valid_records"] == 0
    # a tampered payload breaks the chain
    lines = (out / "ledger.jsonl").read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "eval")
    ev = json.loads(lines[i])
    ev["payload"]["outcome"] = 1 - ev["payload"]["outcome"]
    lines[i] = json.dumps(ev, sort_keys=True)
    (out / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["red-queen", "audit", str(out)]) == 1


def test_world_check_and_errors(tmp_path, capsys) -> None:
    assert main(["red-queen", "world-check", "--seed", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["checks"]["WC-4"]["pass"]
    assert main(["red-queen", "run", "--judge", "lm:hf:smollm2", "--out", str(tmp_path / "x")]) == 2
    assert main(["red-queen", "run", "--budget", "4", "--out", str(tmp_path / "y")]) == 2
