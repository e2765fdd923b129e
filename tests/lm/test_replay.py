"""RecordReplayLM and its call log: a recording answers the same calls offline, a miss raises, a crash mid-append
loses at most the call being written, and request hashes do not drift."""

from __future__ import annotations

import hashlib
import json
import threading

import numpy as np
import pytest

from agentmill.core.types import Message
from agentmill.lm import LM, GenerateConfig, LMError, WhiteBoxLM, load_lm
from agentmill.lm.replay import (CallLog, CallLogError, RecordReplayLM, ReplayMiss, canonical_json, generate_request,
                                 model_key, request_sha256)
from agentmill.lm.scripted import ScriptedLM, choice_responder

CHAT = [Message("system", "Be brief.", meta={"origin": "system"}), Message("user", "What is 2 + 3?")]


def _calls(lm) -> tuple:
    """A little session: a batch of raw prompts, a chat prompt sampled 3 times, a logprobs call."""
    return (lm.generate(["1 + 1 =", "hello there"], GenerateConfig(max_new_tokens=4, temperature=0)),
            lm.generate([CHAT], GenerateConfig(temperature=1.0, seed=4, n=3)),
            lm.logprobs("The sky is", " blue today"))


def test_record_then_replay_gives_identical_answers_without_the_model(tmp_path) -> None:
    path = tmp_path / "calls.jsonl"
    inner = ScriptedLM(choice_responder(["red", "green", "blue"]), spec="scripted:colours")
    rec = RecordReplayLM(inner, path, mode="record")
    recorded = _calls(rec)
    assert inner.calls[:2] == ["1 + 1 =", "hello there"] and len(inner.calls) == 3
    assert rec.recorded == 3 and len(path.read_text().splitlines()) == 3
    assert [c.text for c in recorded[1]] == ["blue", "green", "red"]  # three different samples, all recorded

    silent = ScriptedLM(lambda text: pytest.fail(f"the model was asked: {text!r}"), spec="scripted:colours")
    rep = RecordReplayLM(silent, path)  # mode defaults to replay
    replayed = _calls(rep)
    assert replayed[0] == recorded[0] and replayed[1] == recorded[1]
    assert replayed[2].dtype == np.float64 and np.array_equal(replayed[2], recorded[2])
    assert rep.replayed == 3 and rep.recorded == 0 and silent.calls == []
    assert rep.spec == "scripted:colours" and isinstance(rep, LM)
    assert not isinstance(RecordReplayLM(load_lm("scripted:whitebox"), path), WhiteBoxLM)  # internals not recordable

    offline = RecordReplayLM(None, path, spec="scripted:colours")  # CI need not even build the model
    assert _calls(offline)[1] == recorded[1]


def test_a_miss_raises_naming_the_request_and_the_file(tmp_path) -> None:
    path = tmp_path / "calls.jsonl"
    inner = ScriptedLM({"": "four"}, spec="scripted:x")
    RecordReplayLM(inner, path, mode="record").generate(["2 + 2 ="], GenerateConfig(temperature=0))
    rep = RecordReplayLM(inner, path)
    key = request_sha256(generate_request("scripted:x", ["2 + 2 ="], GenerateConfig(temperature=0.5)))
    with pytest.raises(ReplayMiss) as e:
        rep.generate(["2 + 2 ="], GenerateConfig(temperature=0.5))  # same prompt, other config: a different call
    assert key in str(e.value) and str(path) in str(e.value) and "1 recorded call" in str(e.value)
    assert not isinstance(e.value, LMError)  # not mistaken for a flaky model by graceful-degradation code
    with pytest.raises(ReplayMiss):
        rep.logprobs("2 + 2 =", " four")
    assert len(inner.calls) == 1  # no fallthrough to the model
    with pytest.raises(ReplayMiss):  # another model's recording is not this one's
        RecordReplayLM(None, path, spec="scripted:y").generate(["2 + 2 ="], GenerateConfig(temperature=0))


def test_record_missing_asks_only_what_the_file_lacks(tmp_path) -> None:
    path = tmp_path / "calls.jsonl"
    inner = ScriptedLM(lambda t: t.upper(), spec="scripted:up")
    RecordReplayLM(inner, path, mode="record").generate(["a"])
    both = RecordReplayLM(inner, path, mode="record-missing")
    assert [c.text for c in both.generate(["a"]) + both.generate(["b"]) + both.generate(["b"])] == ["A", "B", "B"]
    assert inner.calls == ["a", "b"] and (both.replayed, both.recorded) == (2, 1)
    assert [c.text for c in RecordReplayLM(None, path, spec="scripted:up").generate(["b"])] == ["B"]


def test_repeated_requests_replay_their_recordings_in_order(tmp_path) -> None:
    path = tmp_path / "calls.jsonl"
    replies = iter(["first", "second"])
    inner = ScriptedLM(lambda t: next(replies), spec="scripted:seq")  # a seedless sampler: same request, new text
    rec = RecordReplayLM(inner, path, mode="record")
    assert [rec.generate(["go"])[0].text for _ in range(2)] == ["first", "second"]
    rep = RecordReplayLM(None, path, spec="scripted:seq")
    assert [rep.generate(["go"])[0].text for _ in range(3)] == ["first", "second", "second"]


def test_a_torn_last_line_is_ignored_and_cut_off_by_the_next_append(tmp_path) -> None:
    path = tmp_path / "calls.jsonl"
    inner = ScriptedLM(lambda t: t[::-1], spec="scripted:rev")
    RecordReplayLM(inner, path, mode="record").generate(["abc"])
    good = path.read_bytes()
    path.write_bytes(good + good[: len(good) // 2])  # a crash half-way through appending a second record
    rep = RecordReplayLM(inner, path, mode="record-missing")
    assert rep.generate(["abc"])[0].text == "cba" and rep.replayed == 1
    assert rep.generate(["xyz"])[0].text == "zyx"  # appended after the torn bytes were removed
    lines = path.read_bytes().split(b"\n")
    assert lines[0] + b"\n" == good and lines[2] == b"" and len(lines) == 3
    assert all(json.loads(x)["request_sha256"] for x in lines[:2])
    assert [c.text for c in RecordReplayLM(None, path, spec="scripted:rev").generate(["xyz"])] == ["zyx"]


def test_a_complete_last_record_without_newline_is_kept(tmp_path) -> None:
    log = CallLog(tmp_path / "log.jsonl")
    log.append({"request_sha256": "a", "v": 1})
    log.path.write_bytes(log.path.read_bytes().rstrip(b"\n"))  # e.g. edited by hand
    assert log.load()["a"][0]["v"] == 1
    log.append({"request_sha256": "b", "v": 2})
    assert sorted(log.load()) == ["a", "b"]


def test_damage_before_the_last_line_is_refused_unless_skipping_was_asked_for(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"request_sha256": "a"}\n{"request_sha256": "b", "torn\n{"request_sha256": "c"}\n')
    with pytest.raises(CallLogError, match=r"log\.jsonl: line 2 is not a JSON object"):
        CallLog(path).load()
    with pytest.raises(CallLogError, match="line 2"):
        RecordReplayLM(None, path, spec="scripted:x")
    assert sorted(CallLog(path, skip_bad_lines=True).load()) == ["a", "c"]
    path.write_text('{"request_sha256": "a"}\n{"other": 1}\n')
    with pytest.raises(CallLogError, match="line 2 has no 'request_sha256' field"):
        CallLog(path).load()


def test_replay_needs_an_existing_file_and_record_needs_a_model(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="record it first"):
        RecordReplayLM(load_lm("scripted:echo"), tmp_path / "none.jsonl")
    with pytest.raises(ValueError, match="needs one"):
        RecordReplayLM(None, tmp_path / "x.jsonl", mode="record", spec="scripted:echo")
    with pytest.raises(ValueError, match="mode must be one of"):
        RecordReplayLM(load_lm("scripted:echo"), tmp_path / "x.jsonl", mode="write")
    with pytest.raises(ValueError, match="spec"):
        RecordReplayLM(None, tmp_path / "x.jsonl")


def test_request_hash_is_pinned_and_ignores_transport_and_harness_metadata() -> None:
    cfg = GenerateConfig(max_new_tokens=8, temperature=0.0, stop=("\n",), seed=3)
    req = generate_request("openai:m@http://127.0.0.1:4321/v1", [CHAT], cfg)
    assert req["model"] == "openai:m" and req["prompts"][0] == [{"role": "system", "content": "Be brief."},
                                                                 {"role": "user", "content": "What is 2 + 3?"}]
    # A changed canonical form would orphan every recording: these literals must only change on purpose.
    assert canonical_json(req) == (
        '{"config": {"max_new_tokens": 8, "n": 1, "no_repeat_ngram_size": 0, "seed": 3, "stop": ["\\n"], '
        '"stop_regex": null, "temperature": 0.0, "top_p": 1.0}, "model": "openai:m", "op": "generate", "prompts": '
        '[[{"content": "Be brief.", "role": "system"}, {"content": "What is 2 + 3?", "role": "user"}]]}')
    assert request_sha256(req) == "c4388af0846cd813f06cebc1b76b7267a1a68a6b08230e45988632ec4d0403b1"
    same = generate_request("openai:m@http://127.0.0.1:9999/v1", [[Message("system", "Be brief."),
                                                                  {"role": "user", "content": "What is 2 + 3?"}]], cfg)
    assert request_sha256(same) == request_sha256(req)
    assert request_sha256(generate_request("openai:m@x", [CHAT], GenerateConfig(max_new_tokens=8, temperature=0.0,
                                                                               stop=("\n",), seed=4))) != \
        request_sha256(req)
    assert model_key("hf:smollm2") == "hf:smollm2" and model_key("openai:a@b@http://h/v1") == "openai:a@b"
    # AutoCog's lm_calls.jsonl keys are sha256(json.dumps([prompt, temperature, max_new_tokens, seed])).
    assert request_sha256(["p ü", 0.7, 1024, 12]) == \
        hashlib.sha256(json.dumps(["p ü", 0.7, 1024, 12]).encode()).hexdigest()


def test_concurrent_recording_keeps_every_line_whole(tmp_path) -> None:
    path = tmp_path / "calls.jsonl"
    lm = RecordReplayLM(ScriptedLM(lambda t: "x" * 5000, spec="scripted:big"), path, mode="record")
    threads = [threading.Thread(target=lambda i=i: [lm.generate([f"p{i}-{j}"]) for j in range(10)])
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert lm.recorded == 40 and sum(len(v) for v in CallLog(path).load().values()) == 40
