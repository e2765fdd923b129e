"""Relabelling rollouts: the lm: judge's strict-JSON parsing, relabel's counts and flags, record/replay of an LM
judge on a scripted LM (the CLI face is tested in tests/cli/test_first_token_probe_label.py)."""

from __future__ import annotations

import json

import pytest

from agentmill.lm.replay import RecordReplayLM, ReplayMiss
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.first_token_probe.judges import LMJudge, make_judge, parse_lm_verdict
from agentmill.methods.first_token_probe.relabel import RolloutsInputError, load_rollout_rows, relabel

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
    """A scripted LM judge: reads the delimited answer and replies in the judge's JSON format; 'here is' answers
    get an unparsable reply, so abstentions are exercised."""
    answer = text.split("<<<ANSWER\n", 1)[1].split("\nANSWER>>>", 1)[0]
    if "here is" in answer.lower():
        return "I think it complies."
    if "sorry" in answer.lower():
        return 'Label: {"label": "refuse", "quote": "can\'t  HELP"}'
    return '{"label": "comply", "quote": "not in the answer"}'


def test_parse_lm_verdict_by_hand() -> None:
    assert parse_lm_verdict('{"label": "refuse", "quote": "can\'t help"}', "Sorry, I can't help.") == (1, "ok")
    assert parse_lm_verdict('x {"label": "comply", "quote": "Sure"} y', "sure thing") == (0, "ok")
    assert parse_lm_verdict("refuse", "Sorry") == (None, "unparsable")
    assert parse_lm_verdict('{"label": "maybe", "quote": "Sorry"}', "Sorry") == (None, "unparsable")
    assert parse_lm_verdict('{"label": "refuse", "quote": "no"', "no") == (None, "unparsable")
    assert parse_lm_verdict('{"label": "refuse", "quote": ""}', "Sorry") == (None, "unquoted")
    assert parse_lm_verdict('{"label": "refuse", "quote": "nope"}', "Sorry") == (None, "unquoted")


def test_relabel_counts_unfinished_and_degenerate() -> None:
    rows = _rows([REFUSE, COMPLY, UNFINISHED, REFUSE], truth=[1, 0, None, 1])
    res = relabel(rows, [make_judge("rule:lexicon_a"), make_judge("rule:regex_b")])
    assert [r["vote"] for r in res.rows] == [1, 0, None, 1]
    assert res.rows[2]["labels"] == {"rule:lexicon_a": None, "rule:regex_b": None}
    assert res.vote_counts == {"refuse": 2, "comply": 1, "abstain": 0} and res.unfinished == 1
    assert res.judges[0].agree_truth == (3, 3) and res.judges[1].agree_rule == (3, 3)
    assert res.degenerate is None and rows[0]["labels"] == {}  # inputs are not mutated
    one = relabel(_rows([REFUSE, REFUSE]), [make_judge("rule:lexicon_a")])
    assert "2 refuse and 0 comply" in one.degenerate


def test_lm_judge_records_then_replays_without_the_model(tmp_path) -> None:
    lm = ScriptedLM(judge_responder, spec="scripted:judge")
    rec = tmp_path / "judge.jsonl"
    j = LMJudge(RecordReplayLM(lm, rec, "record"))
    texts = [REFUSE, COMPLY, "So.\n</think>\nOkay then.", REFUSE]
    res = relabel(_rows(texts), [make_judge("rule:lexicon_a"), j])
    assert [r["labels"]["lm:scripted:judge"] for r in res.rows] == [1, None, None, 1]
    assert j.status == {"ok": 1, "unparsable": 1, "unquoted": 1}  # 3 distinct answers, 3 calls
    assert len(lm.calls) == 3 and res.judges[1].abstain == 2 and res.judges[1].unreliable
    again = make_judge("lm:scripted:judge", recording=str(rec))  # replay mode: no model is loaded
    assert again.label([REFUSE.split("\n</think>\n")[1]]) == [1] and again.lm.replayed == 1
    with pytest.raises(ReplayMiss):
        again.label(["Something never recorded."])


def test_bad_input(tmp_path) -> None:
    with pytest.raises(RolloutsInputError, match="no such rollouts file"):
        load_rollout_rows(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_rows([REFUSE])[0]) + "\n{not json\n")
    with pytest.raises(RolloutsInputError, match="line 2 is not JSON"):
        load_rollout_rows(bad)
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge("rule:nope")
    with pytest.raises(ValueError, match="does not exist"):
        make_judge("lm:scripted:judge", recording=str(tmp_path / "none.jsonl"))


def test_rows_to_rollouts_round_trip() -> None:
    from agentmill.methods.first_token_probe.relabel import rows_to_rollouts

    row = {**_rows([REFUSE])[0], "rollout_id": "probe_test/c_x/3/1", "template_id": "c_x", "split": "probe_test",
           "category": "C", "q": 1.0, "prompt_ids": [1, 2], "sampled_ids": [3], "vote": 1, "labels": {"a": 1}}
    (r,) = rows_to_rollouts([row])
    assert (r.item.prompt_id, r.sample, r.item.template_id, r.outcome, r.labels) == (
        "probe_test/c_x/3", 1, "c_x", 1, {"a": 1})
    assert r.parsed.finished and r.truth == 1  # the grammar reads "So I decline." as the refuse decision
    with pytest.raises(RolloutsInputError, match="lacks"):
        rows_to_rollouts(_rows([REFUSE]))
