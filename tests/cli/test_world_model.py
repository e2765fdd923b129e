"""``agentmill world-model`` through ``main``: collect, export, score, and a bad input that fails loudly."""

from __future__ import annotations

import json

import pytest

from agentmill.cli.main import main


def test_collect_export_and_score(tmp_path, capsys) -> None:
    assert main(["world-model", "collect", "--train", "1", "--cpt", "1", "--dev", "0", "--test", "1", "--episodes",
                 "1", "--out", str(tmp_path / "d")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["tasks"] == 3 and out["rows"] > 0
    assert main(["world-model", "export", "--data", str(tmp_path / "d" / "transitions.jsonl"), "--out",
                 str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "textgame_test.jsonl").exists()
    (tmp_path / "j.jsonl").write_text(json.dumps({"task": "mcp", "failed": 1.0}) + "\n")
    assert main(["world-model", "score", "--judged", str(tmp_path / "j.jsonl")]) == 0
    assert '"failed": 1' in capsys.readouterr().out


def test_unknown_stage_is_refused() -> None:
    with pytest.raises(SystemExit):
        main(["world-model", "train", "--stage", "pretrain", "--data", "x", "--out", "y"])
