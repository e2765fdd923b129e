"""``agentmill forensics export --inspect``: a replay recorded by the real CLI is exported through ``main`` and read
back with Inspect's ``read_eval_log``; bad input exits 2 with one line naming the problem."""

from __future__ import annotations

import argparse
import shlex

import pytest

from agentmill.cli.forensics import EXPORT_EXAMPLES
from agentmill.cli.main import build_parser, main


def test_export_a_cli_replay_and_read_it_back(tmp_path, capsys) -> None:
    read_eval_log = pytest.importorskip("inspect_ai.log").read_eval_log
    rp = tmp_path / "rp"
    assert main(["forensics", "replay", "env:loyalty", "--mode", "episode", "--set", "actor=developer",
                 "--out", str(rp)]) == 0
    capsys.readouterr()
    out = tmp_path / "logs" / "replay.eval"
    assert main(["forensics", "export", "--inspect", "--in", str(rp), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 2 samples" in printed and "arm actor=developer: 0/1 concerning" in printed
    log = read_eval_log(str(out))
    s = {x.metadata["arm"]: x for x in log.samples}
    assert set(s) == {"control", "actor=developer"}
    assert s["control"].scores["concerning"].value == 1 and s["actor=developer"].scores["concerning"].value == 0
    assert s["actor=developer"].metadata["replay_of_sample"] == s["control"].id
    calls = [m.tool_calls[0].arguments["command"] for m in s["control"].messages if m.role == "assistant"
             and m.tool_calls]
    assert calls == ["cat questions.txt", "cat notes.txt", "submit --suspicious false"]
    assert log.results.scores[0].metrics["mean"].value == 0.5


def test_bad_input_exits_2(tmp_path, capsys) -> None:
    rp = tmp_path / "rp"
    assert main(["forensics", "replay", "env:tedium", "--out", str(rp)]) == 0
    capsys.readouterr()
    assert main(["forensics", "export", "--in", str(rp), "--out", str(tmp_path / "x.eval")]) == 2
    assert "--inspect" in capsys.readouterr().err
    assert main(["forensics", "export", "--inspect", "--in", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "x.eval")]) == 2
    assert "no such file" in capsys.readouterr().err
    reg = tmp_path / "reg"
    assert main(["forensics", "register", "--registry", str(reg), "--id", "H", "--motive", "tedium",
                 "--predict", "n_errors=dose:1"]) == 0
    capsys.readouterr()
    assert main(["forensics", "export", "--inspect", "--in", str(reg), "--out", str(tmp_path / "x.json")]) == 2
    assert "hypothesis registry" in capsys.readouterr().err
    assert main(["forensics", "export", "--inspect", "--in", str(reg / "ledger.jsonl"), "--out",
                 str(tmp_path / "x.json")]) == 2
    assert "not a forensics episode" in capsys.readouterr().err
    assert main(["forensics", "export", "--inspect", "--in", str(rp), "--out", str(tmp_path / "x.html")]) == 2
    assert ".eval" in capsys.readouterr().err


@pytest.mark.parametrize("line", [x.strip() for x in EXPORT_EXAMPLES.splitlines() if x.strip().startswith("agentmill")])
def test_export_examples_parse(line: str) -> None:
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.inspect and callable(args.fn) and isinstance(args, argparse.Namespace)
