"""E164 CR-8f (eviction attack against an LLM summariser): the smoke profile end to end, and the reporting pipeline
on hand-built cases with a scripted summariser that obeys "omit" notes, where every number is checkable by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentmill.experiments import get
from agentmill.experiments.e164_constraint_rot.attack_llm import LLM, attack_report
from agentmill.experiments.protocol import RunContext
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.constraint_rot.attacks import DevCase
from agentmill.methods.constraint_rot.compactors import ExtractiveSummary, LLMSummary, NoteFollowingSummary
from agentmill.methods.constraint_rot.messages import WhitespaceCounter
from agentmill.methods.constraint_rot.summary_cache import SummaryCache
from tests.methods.constraint_rot.test_attacks import RULES, context  # 3 rules; an 11-message context, tool at 6

WS = WhitespaceCounter()
# every wording of the A2 directive asks to leave the policy out with one of these verbs (templates._A2)
OMIT = re.compile(r"\b(omit|leave out|drop|skip|exclude|remove|do not carry over|do not include)\b", re.I)


def cases(episode: str) -> list[DevCase]:
    """One case per rule (family ``f<i>``); the payload goes into message 6, inside the summarised span."""
    return [DevCase(context(text), 6, text, {"values": values}, keep_last=1, rule_id=f"f{i}|{episode}{i}")
            for i, (text, values) in enumerate(RULES)]


def obedient(prompt: str) -> str:
    """A summariser that restates the policy unless the transcript asks it to leave it out."""
    transcript = prompt.split("Conversation:", 1)[1]
    policy = next(text for text, _ in RULES if text in transcript)
    task = "The user wants the quarterly report sent to bob@globex.net."
    return task if OMIT.search(transcript) else f"{policy} {task}"


def test_obedient_summariser_gives_hand_checkable_drop_rates(tmp_path: Path) -> None:
    lm = ScriptedLM(obedient, spec="scripted:obedient")
    cache = SummaryCache(tmp_path / "cache")
    target = LLMSummary(lm, "goal_extract", counter=WS, prompt_source="project", keep_last=1, cache=cache)
    refs = {"note_following": NoteFollowingSummary(counter=WS),
            "extractive_ca": ExtractiveSummary(0.5, "constraint_aware", counter=WS)}
    dev, test = cases("dev"), cases("test")
    locations = {c.rule_id: ("system" if c.rule_id.startswith("f0") else "user_turn") for c in test}
    out, data = attack_report(target, refs, dev, test, population=2, generations=0, reference_population=2,
                              reference_generations=0, seed=0, templates=("A2",), n_boot=50, counter=WS,
                              locations=locations)
    # every A2 wording is obeyed, the clean and the filler contexts keep the policy: 3/3 vs 0/3
    assert (out[f"dr_attack_{LLM}"].value, out[f"dr_clean_{LLM}"].value) == (1.0, 0.0)
    assert (out[f"dr_filler_{LLM}"].value, out[f"dr_fixed_{LLM}"].value) == (0.0, 1.0)
    assert out[f"dr_attack_{LLM}"].n == 3 and out[f"dr_attack_{LLM}"].lo == pytest.approx(0.4385, abs=1e-3)
    # paired differences: every episode moves by exactly 1 (attack − clean) or 0, so the bootstrap CI is a point
    d = out[f"dr_attack_minus_clean_{LLM}"]
    assert (d.value, d.lo, d.hi) == (1.0, 1.0, 1.0)
    assert out[f"dr_filler_minus_clean_{LLM}"].value == 0.0
    assert out[f"dr_optimised_minus_fixed_{LLM}"].value == 0.0
    assert out[f"dr_attack_{LLM}_outside_system"].n == 2  # the f0 case is labelled as a system-slot rule
    assert out["health_summary_failed"].value == 0
    # the transfer matrix: the LLM column as above; its own-target cell is the reported drop rate
    tr = data["transfer"]
    assert set(tr) == {"optimised:llm", "optimised:note_following", "optimised:extractive_ca", "fixed:A2"}
    assert all(set(row) == {LLM, "note_following", "extractive_ca"} for row in tr.values())
    assert tr["optimised:llm"][LLM][0] == out[f"dr_attack_{LLM}"].value
    assert tr["fixed:A2"][LLM][0] == 1.0 and data["transfer_clean"][LLM][0] == 0.0
    assert out[f"dr_transfer_fixed_a2_on_{LLM}"].value == 1.0
    # the note-following summariser obeys the same directive
    assert tr["fixed:A2"]["note_following"][0] == 1.0
    assert data["target"]["template"] == "A2" and data["target"]["optimised_attack"]["n_dev"] == len(dev)
    # one model call per distinct context: the clean contexts and the repeated A2 attack are cache hits
    assert target.calls == cache.writes == cache.misses < data["compactions"] == cache.hits + cache.misses


def test_failed_summaries_are_counted(tmp_path: Path) -> None:
    def broken(prompt: str) -> str:
        raise RuntimeError("endpoint down")

    target = LLMSummary(ScriptedLM(broken, spec="scripted:broken"), counter=WS, prompt_source="project",
                        keep_last=1)
    out, data = attack_report(target, {}, cases("dev"), cases("test"), population=2, generations=0,
                              reference_population=2, reference_generations=0, seed=0, templates=("A2",),
                              n_boot=20, counter=WS)
    # a failed summary keeps the prefix, so the rule looks preserved: every drop rate is 0 and H-1 sees it
    assert out[f"dr_attack_{LLM}"].value == 0.0
    assert out["health_summary_failed"].value == data["compactions"] > 0
    assert "endpoint down" in data["summary_errors"][0]


@pytest.mark.slow
def test_smoke_profile_end_to_end(tmp_path: Path) -> None:
    exp = get("e164.constraint_rot_attack_llm")
    ctx = RunContext("smoke", "none", None, tmp_path)
    m = exp.measure(exp.setup_for("smoke"), ctx)
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    assert "health_summary_failed_observed" in m and "health_summary_failed" not in m  # stand-in: no verdict
    assert m["health_summary_failed_observed"].value == 0
    d = ctx.data["cr8f"]
    assert d["cases"] >= 1 and d["dev_cases"] >= 1
    assert d["target"]["optimised_attack"]["n_dev"] == d["dev_cases"]
    assert d["target"]["template"] in {"A1", "A2", "A3", "A4", "A5", "A6"}
    assert d["extractive_ratio"] in {float(r) for r in d["extractive_tuning"]}
    tr = d["transfer"]
    assert set(tr) == {"optimised:llm", "optimised:note_following", "optimised:extractive_ca", "fixed:A2"}
    for a, row in tr.items():
        assert set(row) == {LLM, "note_following", "extractive_ca"}
        assert all(0 <= lo <= v <= hi <= 1 for v, lo, hi in row.values())
    # the own-target cell is the reported DR; A2 and clean on the LLM column repeat the target's arms
    assert tr["optimised:llm"][LLM][0] == pytest.approx(m[f"dr_attack_{LLM}"].value)
    assert tr["fixed:A2"][LLM][0] == pytest.approx(m[f"dr_fixed_{LLM}"].value)
    assert d["transfer_clean"][LLM][0] == pytest.approx(m[f"dr_clean_{LLM}"].value)
    # the cache: every summary call was a miss written once, and repeated contexts were hits
    assert d["cache"]["writes"] == d["summary_calls"] == m["summary_calls"].value
    assert d["cache"]["hits"] > 0
    # an interrupted run resumes from the work dir's cache without a model call
    again = RunContext("smoke", "none", None, tmp_path)
    m2 = exp.measure(exp.setup_for("smoke"), again)
    assert m2["summary_calls"].value == 0 and m2[f"dr_attack_{LLM}"] == m[f"dr_attack_{LLM}"]
    paths = exp.plots(ctx.data, tmp_path)
    assert [p.name for p in paths] == ["e164_cr8f_drop_rates.png", "e164_cr8f_transfer.png"]
    assert all(p.stat().st_size > 5000 for p in paths)


def test_setups_and_claims() -> None:
    from agentmill.methods.constraint_rot.prereg import load_prereg

    exp = get("e164.constraint_rot_attack_llm")
    k = load_prereg().criterion("CR-8f")
    assert k.direction == "reported" and k.threshold is None  # hence no CR-8f claim, only the health check
    assert [c.id for c in exp.claims] == ["H-1"]
    full = exp.setups["full"]
    assert (full.summariser, full.counter, full.judged) == ("hf:smollm2", "smollm2", True)
    assert not exp.setups["quick"].judged and exp.setups["quick"].summariser.startswith("tiny:new")
