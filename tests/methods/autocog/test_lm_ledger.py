"""LM calls as ledger events [R]: recorded before the step they serve, required by the audit, and
replayed from the ledger on resume so no call is made twice."""

from __future__ import annotations

import json

import pytest

from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.autocog.agents.llm import LLMAdvocate, LLMArbiter, LLMReviser, ReplayDivergence
from agentmill.methods.autocog.agents.loopback import scripted_reply
from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.audit import audit
from agentmill.methods.autocog.cohorts import SimulatedCohort
from agentmill.core.ledger import Ledger
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
from agentmill.methods.autocog import library as L


def _loop(lm, run_dir, rounds: int = 1):
    adv = tuple(LLMAdvocate(lm, fallback=SearchAdvocate(n_designs=2), run_dir=run_dir, name=f"advocate{k}")
                for k in (1, 2))
    rev = LLMReviser(lm, fallback=ProgramSpaceReviser(max_candidates=6, rescore_n=20), run_dir=run_dir, max_iters=1)
    arb = LLMArbiter(lm, fallback=RuleArbiter(), run_dir=run_dir)
    return AutoCogLoop(LoopConfig(n_rounds=rounds, n_sim=20, validation_round=False), seeds=(L.ttb(), L.tallying()),
                       advocates=adv, arbiter=arb, reviser=rev,
                       cohort=SimulatedCohort(L.wadd(), action_noise=0.1, seed=0), run_dir=run_dir)


def test_every_lm_call_is_a_ledger_event_before_its_step(tmp_path) -> None:
    lm = ScriptedLM(scripted_reply, spec="openai:stub@http://127.0.0.1:1/v1")
    _loop(lm, tmp_path).run()
    led = Ledger(tmp_path)
    calls = [e for e in led.events if e["kind"] == "lm_call"]
    # round 1: advocate1 malformed + retry (2), advocate2 (1), arbiter (1), reviser broken + retry (2), critic (1)
    assert len(calls) == len(lm.calls) == 7
    assert led.payload(calls[-1])["role"] == "critic" and calls[-1]["step"] == "r1/candidates/lm02"
    assert [e["step"] for e in calls[:2]] == ["r1/s1/proposal/lm00", "r1/s1/proposal/lm01"]
    p = led.payload(calls[0])
    assert p["model"] == "openai:stub" and p["role"] == "advocate1" and p["response"].startswith('{"design"')
    assert p["prompt"] == lm.calls[0] and "latency_s" in calls[0]["meta"] and "127.0.0.1" in calls[0]["meta"]["endpoint"]
    step = led.by_step["r1/s1/proposal"]
    assert all(c["seq"] < step["seq"] for c in calls[:2])
    assert led.payload(led.events[0])["lm_roles"] == ["advocate1", "advocate2", "arbiter", "reviser"]
    assert audit(tmp_path) == []


def test_audit_requires_an_lm_call_for_each_lm_driven_step(tmp_path) -> None:
    led = Ledger(tmp_path)
    led.append("config", "config", {"lm_roles": ["arbiter"]})
    led.append("proposal", "r1/s1/proposal", {}, round=1, slot=1)  # advocate1 is programmatic: fine
    led.append("lm_call", "r1/verdict/lm00", {"request_sha256": "a"}, round=1)
    led.append("verdict", "r1/verdict", {}, round=1)
    led.append("verdict", "r2/verdict", {}, round=2)  # no call
    led.append("lm_call", "r3/verdict/lm00", {"request_sha256": "b"}, round=3)
    led.append("lm_call", "r3/verdict/lm01", {"request_sha256": "b"}, round=3)  # the same request again
    led.append("verdict", "r3/verdict", {}, round=3)
    probs = audit(tmp_path)
    assert "step 'r2/verdict' (arbiter) has no lm_call event" in probs
    assert "step 'r3/verdict' repeats an lm_call request" in probs
    assert not any("r1/" in p or "proposal" in p for p in probs)


def test_resume_replays_recorded_calls_and_asks_only_the_rest(tmp_path) -> None:
    ref = tmp_path / "ref"
    lm = ScriptedLM(scripted_reply, spec="scripted:stub")
    head = _loop(lm, ref).run().ledger_head
    lines = (ref / "ledger.jsonl").read_text().splitlines(keepends=True)
    cut = next(i for i, x in enumerate(lines) if json.loads(x)["step"] == "r1/s2/proposal/lm00") + 1
    recorded = sum(json.loads(x)["kind"] == "lm_call" for x in lines[:cut])
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "ledger.jsonl").write_text("".join(lines[:cut]))  # no lm_calls.jsonl: only the ledger remembers
    (killed / "blobs").mkdir()
    for b in (ref / "blobs").iterdir():
        (killed / "blobs" / b.name).write_bytes(b.read_bytes())
    lm2 = ScriptedLM(scripted_reply, spec="scripted:stub")
    assert _loop(lm2, killed).run().ledger_head == head
    assert recorded == 3 and len(lm2.calls) == len(lm.calls) - recorded


def test_a_diverged_resume_fails_loudly(tmp_path) -> None:
    _loop(ScriptedLM(scripted_reply, spec="scripted:stub"), tmp_path / "ref").run()
    ref = Ledger(tmp_path / "ref")
    led = Ledger(tmp_path / "d")
    led.append("config", "config", ref.payload(ref.events[0]))
    led.append("lm_call", "r1/s1/proposal/lm00", {"request_sha256": "0" * 64, "response": "{}"}, round=1, slot=1)
    with pytest.raises(ReplayDivergence, match="resume diverged at ledger step 'r1/s1/proposal/lm00'"):
        _loop(ScriptedLM(scripted_reply, spec="scripted:stub"), tmp_path / "d").run()
