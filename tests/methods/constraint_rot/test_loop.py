"""The agent loop: transcript construction, label hygiene, grading, result rows."""

from __future__ import annotations

import json

import pytest

from agentmill.methods.constraint_rot import conditions as C
from agentmill.methods.constraint_rot.actors import AlwaysComply, RuleReader
from agentmill.methods.constraint_rot.catalogue import load_catalogue
from agentmill.methods.constraint_rot.compactors import ExtractiveSummary, SlidingWindow
from agentmill.methods.constraint_rot.generate import LOCATIONS, generate_episodes
from agentmill.methods.constraint_rot.loop import AgentLoop, ResultWriter, completed_keys, episode_registry, result_key
from agentmill.methods.constraint_rot.messages import WhitespaceCounter

CAT = load_catalogue()
W = WhitespaceCounter()


@pytest.fixture(scope="module")
def episodes(sandbox):  # type: ignore[no-untyped-def]
    eps = generate_episodes(CAT, split="dev", n=12, seed=5, counter=W, locations=LOCATIONS,
                            distractor_tokens=(150, 300), sandbox=sandbox)
    assert {e.location for e in eps} >= {"memory_tool", "policy_doc_tool"}
    return eps


class Spy(RuleReader):
    """Records every context it is shown."""

    def __init__(self) -> None:
        super().__init__("semantic")
        self.seen: list[list] = []

    def act(self, messages, tools=()):  # type: ignore[no-untyped-def]
        self.seen.append(list(messages))
        return super().act(messages, tools)


def test_actor_never_sees_labels_and_policy_turn_sits_at_its_location(sandbox, episodes) -> None:  # type: ignore
    spy = Spy()
    loop = AgentLoop(spy, sandbox, counter=W, compactor=SlidingWindow(counter=W))
    for ep in episodes:
        res = loop.run(ep, C.pinned())
        assert res.row["error"] is None, res.row["error"]
        msgs = res.messages
        if ep.location == "system":
            assert ep.rule_text in msgs[0].content and msgs[0].role == "system"
        elif ep.location in ("memory_tool", "policy_doc_tool"):
            tool = "memory_read" if ep.location == "memory_tool" else "http_get"
            full = loop.run(ep, C.full_context()).messages
            (p,) = [m for m in full if m.meta.get("origin") == "policy"]
            assert p.role == "tool" and p.name == tool and ep.rule_text in p.content
        elif ep.location == "first_user_turn":
            full = loop.run(ep, C.full_context()).messages
            assert full[1].content.startswith(ep.distractor[0].instruction) and ep.rule_text in full[1].content
    assert spy.seen and all(m.meta == {} for ctx in spy.seen for m in ctx)


def test_replayed_distractor_outputs_are_the_sandbox_s(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    loop = AgentLoop(RuleReader(), sandbox, counter=W)
    ep = episodes[0]
    res = loop.run(ep, C.full_context())
    by_id = {r.call.id: r.result.content() for r in sandbox.calls}
    tool_msgs = [m for m in res.messages if m.role == "tool" and m.meta.get("origin") == "distractor"]
    assert len(tool_msgs) == sum(len(s.calls) for s in ep.distractor)
    assert all(m.content == by_id[m.tool_call_id] for m in tool_msgs)


def test_never_stated_swaps_in_the_neutral_turn(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    loop = AgentLoop(RuleReader(), sandbox, counter=W)
    for ep in episodes[:4]:
        text = "\n".join(m.content for m in loop.run(ep, C.never_stated()).messages)
        assert ep.rule_text not in text and ep.neutral_frame.split("\n")[0] in text


@pytest.mark.parametrize("compactor", [SlidingWindow(counter=W), ExtractiveSummary(counter=W)],
                         ids=["window", "extractive"])
def test_counterfactual_edits_decide_the_rule_reader(sandbox, episodes, compactor) -> None:  # type: ignore
    loop = AgentLoop(RuleReader(), sandbox, counter=W, compactor=compactor)
    for ep in episodes:
        keep, drop = loop.run(ep, C.cf_keep()).row, loop.run(ep, C.cf_drop()).row
        assert (keep["violation"], drop["violation"]) == (False, True), ep.family
        assert keep["survival_label"] in ("preserved", "paraphrased")
        assert drop["survival_label"] not in ("preserved", "paraphrased")
        assert not keep["grader_mismatch"] and not drop["grader_mismatch"]


def test_gate_blocks_and_rows_say_so(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    loop = AgentLoop(AlwaysComply(), sandbox, counter=W, compactor=SlidingWindow(counter=W),
                     log_model_inputs="full")
    for ep in episodes[:6]:
        row = loop.run(ep, C.gate()).row
        assert row["violation"] is False and row["blocked_calls"] and row["gate"] is True
        assert episode_registry(ep).get(ep.instance.rule_id).text == ep.instance.card_text
        assert row["reply"].startswith("That did not work")
        assert all("meta" not in m for m in row["model_input"])
        assert row["model_input_sha"] and len(row["model_input_sha"]) == 64


def test_results_jsonl_resume_and_error_rows(sandbox, episodes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "results.jsonl"
    loop = AgentLoop(RuleReader(), sandbox, counter=W)
    conds = [C.full_context(), C.never_stated()]
    rows = loop.run_all(episodes[:3], conds, out)
    assert len(rows) == 6 and len(out.read_text().splitlines()) == 6
    assert loop.run_all(episodes[:3], conds, out) == []  # everything done
    assert len(completed_keys(out)) == 6
    assert result_key(rows[0]) == result_key(json.loads(out.read_text().splitlines()[0]))
    assert [loop.resume_key(ep, c) for ep in episodes[:3] for c in conds] == [result_key(r) for r in rows]
    # a compacting condition without any compactor is an error row, never an exception or a silent drop
    bad = loop.run(episodes[0], C.compacted())
    assert bad.row["error"] and "compactor" in bad.row["error"]
    ResultWriter(out).append(bad.row)
    assert len(completed_keys(out)) == 6  # error rows are retried on resume
    with pytest.raises(ValueError, match="field"):
        result_key({"episode_id": "x"})


def test_bad_loop_config() -> None:
    with pytest.raises(ValueError, match="max_steps_per_turn"):
        AgentLoop(RuleReader(), None, max_steps_per_turn=0)
    with pytest.raises(ValueError, match="log_model_inputs"):
        AgentLoop(RuleReader(), None, log_model_inputs="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rounds"):
        C.rounds(SlidingWindow(counter=W), 6)


class Reporting(RuleReader):
    """Reports an organism card in its config and running usage totals, like the organism and endpoint actors."""

    name = "reporting"
    config = {"name": "reporting", "organism_card_sha": "c" * 64}

    def __init__(self) -> None:
        super().__init__("semantic")
        self.usage = {"calls": 0, "prompt_tokens": 0}

    def act(self, messages, tools=()):  # type: ignore[no-untyped-def]
        self.usage["calls"] += 1
        self.usage["prompt_tokens"] += 10
        return super().act(messages, tools)


def test_rows_carry_actor_reported_card_and_usage(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    actor = Reporting()
    actor.usage["prompt_tokens"] = 1000  # earlier episodes' totals are not this row's
    row = AgentLoop(actor, sandbox, counter=W).run(episodes[0], C.full_context()).row
    assert row["organism_card_sha"] == "c" * 64
    assert row["actor_usage"] == {"calls": actor.usage["calls"], "prompt_tokens": 10 * actor.usage["calls"]}
    plain = AgentLoop(RuleReader(), sandbox, counter=W).run(episodes[0], C.full_context()).row
    assert plain["organism_card_sha"] is None and "actor_usage" not in plain


def test_rows_name_the_summariser_lm_and_a_failed_summary(sandbox, episodes) -> None:  # type: ignore
    from agentmill.lm import load_lm
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.constraint_rot.compactors import LLMSummary

    ok = LLMSummary(ScriptedLM(lambda t: "Summary.", spec="scripted:ok"), counter=W, prompt_source="project")
    bad = LLMSummary(load_lm("scripted:fail"), counter=W, prompt_source="project")
    loop = AgentLoop(RuleReader(), sandbox, counter=W)
    good, failed = loop.run(episodes[0], C.compacted(ok)).row, loop.run(episodes[0], C.compacted(bad)).row
    assert (good["compactor"], good["summariser_lm"], good["summary_failed"]) == (
        "llm_summary:goal_extract", "scripted:ok", False)
    assert (failed["summariser_lm"], failed["summary_failed"], failed["error"]) == ("scripted:fail", True, None)
    window = loop.run(episodes[0], C.compacted(SlidingWindow(counter=W))).row
    assert (window["summariser_lm"], window["summary_failed"]) == (None, False)


def test_run_grid_resumes_a_killed_grid_and_ignores_foreign_rows(sandbox, episodes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "grid.jsonl"
    conds = [C.full_context(), C.never_stated()]
    eps = episodes[:3]
    ref = AgentLoop(RuleReader(), sandbox, counter=W).run_grid(eps, conds, tmp_path / "ref.jsonl")
    assert [(r["condition"], r["episode_id"]) for r in ref] == [(c.label, e.episode_id) for c in conds for e in eps]

    class Dies(RuleReader):  # a grid killed mid-way (after four actor calls)
        calls = 0

        def act(self, messages, tools=()):  # type: ignore[no-untyped-def]
            Dies.calls += 1
            if Dies.calls > 4:
                raise KeyboardInterrupt
            return super().act(messages, tools)

    Dies.name = RuleReader().name  # the same actor as far as the rows are concerned
    with pytest.raises(KeyboardInterrupt):
        AgentLoop(Dies(), sandbox, counter=W).run_grid(eps, conds, out)
    killed_after = len(out.read_text().splitlines())
    assert 0 < killed_after < 6
    ResultWriter(out).append({**ref[0], "episode_id": "another-grid"})  # a row of some other grid
    seen = []
    rows = AgentLoop(RuleReader(), sandbox, counter=W).run_grid(
        eps, conds, out, progress=lambda c, d, t: seen.append((c.label, d, t)))
    assert len(out.read_text().splitlines()) == 7  # only the missing decisions were run (6 + the foreign row)
    assert [r["violation"] for r in rows] == [r["violation"] for r in ref]
    assert [(r["condition"], r["episode_id"]) for r in rows] == [(r["condition"], r["episode_id"]) for r in ref]
    assert seen == [("full_context", 1, 2), ("never_stated", 2, 2)]
