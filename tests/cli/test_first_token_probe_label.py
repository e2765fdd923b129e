"""``agentmill probe label`` through main([...]): relabel a rollouts file, replay an lm: judge offline from a
recording made on a scripted LM, and the exit codes (2 bad input, 3 degenerate labels)."""

from __future__ import annotations

import json

from agentmill.cli.main import main
from agentmill.lm.replay import RecordReplayLM
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.first_token_probe.judges import LMJudge
from agentmill.methods.first_token_probe.relabel import relabel

REFUSE = "So I decline.\n</think>\nSorry, I can't help with that."
COMPLY = "So I will help.\n</think>\nSure, here is an answer about Ana."
UNFINISHED = "So I will help. Keep it short."


def _rows(texts, truth=None):
    return [{"rollout_id": f"p{i}/0", "text": t, "labels": {}, "vote": None,
             "truth": None if truth is None else truth[i]} for i, t in enumerate(texts)]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def judge_responder(text: str) -> str:
    """A scripted LM judge in the judge's JSON format; 'here is' answers get an unparsable reply."""
    answer = text.split("<<<ANSWER\n", 1)[1].split("\nANSWER>>>", 1)[0]
    if "here is" in answer.lower():
        return "I think it complies."
    return '{"label": "refuse", "quote": "can\'t help"}' if "sorry" in answer.lower() else '{"label": "comply"}'


def test_cli_label(tmp_path, capsys) -> None:
    src = _write(tmp_path / "r.jsonl", _rows([REFUSE, COMPLY, UNFINISHED], truth=[1, 0, None]))
    out = tmp_path / "out.jsonl"
    assert main(["probe", "label", str(src), "--judge", "rule:lexicon_a", "--judge", "classifier:bow",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "refuse 1, comply 1, abstain 0; unfinished 1" in text and "agrees with truth 2/2" in text
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["vote"] for r in rows] == [1, 0, None] and set(rows[0]["labels"]) == {"rule:lexicon_a",
                                                                                   "classifier:bow"}
    # an lm: judge replayed from a recording made on a scripted LM: offline, no model load
    rec = tmp_path / "judge.jsonl"
    relabel(_rows([REFUSE, COMPLY]), [LMJudge(RecordReplayLM(ScriptedLM(judge_responder, spec="scripted:judge"),
                                                              rec, "record"))])
    assert main(["probe", "label", str(src), "--judge", "rule:lexicon_a", "--judge", "lm:scripted:judge",
                 "--recording", str(rec), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "lm:scripted:judge: refuse 1, comply 0, abstain 1" in text and "2 call(s) replayed" in text
    # exit 2: missing file, malformed line (named), unknown judge, a replay miss; exit 3: one class only
    assert main(["probe", "label", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    (tmp_path / "bad.jsonl").write_text('{"rollout_id": "a", "text": "x"}\n[1, 2]\n')
    assert main(["probe", "label", str(tmp_path / "bad.jsonl"), "--out", str(out)]) == 2
    assert "line 2 is not a rollout" in capsys.readouterr().err
    assert main(["probe", "label", str(src), "--judge", "rule:nope", "--out", str(out)]) == 2
    other = _write(tmp_path / "o.jsonl", _rows(["So.\n</think>\nNo way, sorry."]))
    assert main(["probe", "label", str(other), "--judge", "lm:scripted:judge", "--recording", str(rec),
                 "--out", str(out)]) == 2
    assert "replay miss" in capsys.readouterr().err
    one = _write(tmp_path / "one.jsonl", _rows([REFUSE, REFUSE]))
    assert main(["probe", "label", str(one), "--out", str(out)]) == 3
    assert "precondition not met: degenerate labels" in capsys.readouterr().out and out.exists()
