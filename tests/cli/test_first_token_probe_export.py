"""``agentmill probe export --inspect``: rollouts sampled by the real ``probe sample`` command are exported through
``main`` (prompts decoded with the rollouts' own organism) and read back with Inspect's ``read_eval_log``; bad input
exits 2."""

from __future__ import annotations

import json
import shlex

import pytest

from agentmill.cli.first_token_probe import EXPORT_EXAMPLES
from agentmill.cli.main import build_parser, main


@pytest.mark.slow
def test_export_sampled_rollouts_and_read_them_back(tmp_path, capsys) -> None:
    read_eval_log = pytest.importorskip("inspect_ai.log").read_eval_log
    rollouts = tmp_path / "rollouts.jsonl"
    assert main(["probe", "sample", "--allow-unvalidated", "--n-c", "1", "--n-n", "1", "--n-b", "1", "--n-d", "1",
                 "--k", "1", "--k-contested", "1", "--out", str(rollouts)]) == 0
    rows = [json.loads(x) for x in rollouts.read_text().splitlines()]
    capsys.readouterr()
    out = tmp_path / "rollouts.json"
    assert main(["probe", "export", "--inspect", "--in", str(rollouts), "--out", str(out)]) == 0
    assert f"wrote {out}: {len(rows)} rollouts" in capsys.readouterr().out
    log = read_eval_log(str(out))
    s = {x.id: x for x in log.samples}
    assert set(s) == {r["rollout_id"] for r in rows}
    for r in rows:
        smp = s[r["rollout_id"]]
        if r["vote"] is None:
            assert smp.scores["vote"].reason in ("abstain", "unfinished")
        else:
            assert smp.scores["vote"].value == r["vote"]
        assert {j: smp.scores[j].value for j, v in r["labels"].items() if v is not None} == \
               {j: v for j, v in r["labels"].items() if v is not None}
        assert smp.input and "not stored" not in smp.input and smp.input in smp.metadata["prompt_text"]
        assert smp.messages[1].text in r["text"]
    assert {x.name for x in log.results.scores} == {*rows[0]["labels"], "vote", "truth"}


def test_bad_input_exits_2(tmp_path, capsys) -> None:
    assert main(["probe", "export", "--inspect", "--in", str(tmp_path / "nope.jsonl"), "--out",
                 str(tmp_path / "x.eval")]) == 2
    assert "no such file" in capsys.readouterr().err
    wrong = tmp_path / "original.jsonl"
    wrong.write_text(json.dumps({"header": {"env": "tedium"}}) + "\n")
    assert main(["probe", "export", "--inspect", "--in", str(wrong), "--out", str(tmp_path / "x.eval"),
                 "--decode", "none"]) == 2
    assert "not a probe rollout" in capsys.readouterr().err
    assert main(["probe", "export", "--in", str(wrong), "--out", str(tmp_path / "x.eval")]) == 2
    assert "--inspect" in capsys.readouterr().err


@pytest.mark.parametrize("line", [x.strip() for x in EXPORT_EXAMPLES.splitlines() if x.strip().startswith("agentmill")])
def test_export_examples_parse(line: str) -> None:
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.inspect and callable(args.fn)
