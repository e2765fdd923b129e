"""LLMSummary and SummaryCache on a 12-message context small enough to check by hand (whitespace token counts),
with scripted LMs whose recorded prompts are compared character for character."""

from __future__ import annotations

import hashlib

import pytest

from agentmill.core.types import Message
from agentmill.lm import load_lm
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.constraint_rot.compactors.base import SUMMARY_PREFIX, make_config_hash
from agentmill.methods.constraint_rot.compactors.llm_summary import (CONTINUATION_PREFACE, HANDOFF_PREFACE, STYLES,
                                                                    LLMSummary, project_prompt, render_transcript,
                                                                    strip_scratchpad, trim_to_last_tokens)
from agentmill.methods.constraint_rot.compactors.repeated import Repeated
from agentmill.methods.constraint_rot.messages import WhitespaceCounter, count_tokens
from agentmill.methods.constraint_rot.summary_cache import SummaryCache, cache_key
from tests.methods.constraint_rot.contexts import RULE, context  # the shared 12-message context

WS = WhitespaceCounter()
# token counts of context() (whitespace): 1: 8, 2: 4, 3: 2 ("list_inbox {}"), 4: 7, 5: 3, 6: 5, 7: 5


# The prefix 1..7 as the summariser reads it (34 whitespace tokens).
TRANSCRIPT_1_7 = (
    f"User: {RULE}\n"
    "User: Please triage the inbox.\n"
    "Assistant: list_inbox {}\n"
    "Tool (list_inbox): Three new messages from the sales team.\n"
    'Assistant: read_email {"msg_id": "2"}\n'
    "Tool (read_email): The quarterly report is attached.\n"
    "Assistant: The inbox has three messages."
)


def summariser(reply="the summary", style="goal_extract", **kw) -> tuple[LLMSummary, ScriptedLM]:
    lm = reply if isinstance(reply, ScriptedLM) else ScriptedLM(lambda text: reply)
    return LLMSummary(lm, style=style, counter=WS, prompt_source="project", **kw), lm


def sent(prompt: str) -> str:
    """How ScriptedLM records a one-user-message chat prompt."""
    return f"user: {prompt}\nassistant:"


# ---------------------------------------------------------------------------------------------- the main path
def test_goal_extract_exact_prompt_cut_and_summary_message():
    comp, lm = summariser("Send mail only to acme.com.")
    ctx = context()
    res = comp.compact(ctx)  # keep_last=4: 12 - 4 = 8 is a block start, so the tail is 8..11
    assert lm.calls == [sent("Your job is to pull the useful context out of a conversation between a user and an AI "
                             "assistant. What you write will take the place of the conversation below: afterwards "
                             "the assistant sees your text instead of these messages.\n\nKeep only what the "
                             "assistant needs to reach the user's overall goal: the goal itself, what has been done "
                             "so far, what is still open, and the facts needed to carry on. Drop everything that "
                             "does not serve that goal. Write the extracted context only, with no remarks of your "
                             f"own.\n\nConversation:\n{TRANSCRIPT_1_7}")]
    assert res.messages[0] == ctx[0] and res.messages[2:] == ctx[8:]
    note = res.messages[1]
    assert note.role == "user" and note.content == f"{SUMMARY_PREFIX}\nSend mail only to acme.com."
    assert note.meta == {"origin": "summary", "trusted": False, "step": 7}
    assert res.summary_text == "Send mail only to acme.com."
    assert list(res.summariser_input) == ctx[1:8]
    assert res.name == "llm_summary:goal_extract"
    d = res.details
    assert d["input_tokens"] == 34 and d["max_new_tokens"] == 32 and d["summary_tokens"] == 5
    assert d["achieved_ratio"] == pytest.approx(5 / 34)
    assert d["summary_failed"] is False and d["cache"] is None and d["trimmed_messages"] == 0
    assert d["prompt_source"] == "project"
    assert d["prompt_sha"] == hashlib.sha256(project_prompt("goal_extract").encode()).hexdigest()
    assert res.tokens_before == count_tokens(ctx, WS) and res.tokens_after == count_tokens(res.messages, WS)


def test_token_budget_is_ceil_ratio_times_input_with_floor_32():
    long_reply = " ".join(f"w{i}" for i in range(50))
    comp, _ = summariser(long_reply, ratio=1.0)
    res = comp.compact(context())
    assert res.details["max_new_tokens"] == 34  # ceil(1.0 · 34)
    assert res.summary_text.split() == [f"w{i}" for i in range(34)] and res.details["finish_reason"] == "length"
    comp, _ = summariser(long_reply, ratio=0.25)
    assert comp.compact(context()).details["max_new_tokens"] == 32  # ceil(8.5) = 9 < floor 32
    assert comp.max_new_tokens(300) == 75 and summariser(ratio=0.1)[0].max_new_tokens(330) == 33


def test_cut_never_separates_a_tool_call_from_its_result():
    comp, _ = summariser()
    ctx = context()
    res = comp.compact(ctx, keep_last=2)  # 12 - 2 = 10 is read_file's result: the cut moves back to its call
    assert list(res.summariser_input) == ctx[1:9]
    assert res.messages[2:] == ctx[9:]


def test_constructor_keep_last_is_the_default_cut():
    comp, _ = summariser(keep_last=2)
    assert list(comp.compact(context()).summariser_input) == context()[1:9]


def test_short_context_is_left_alone_without_a_model_call():
    comp, lm = summariser()
    ctx = context()[:4]
    res = comp.compact(ctx, keep_last=4)
    assert res.messages == ctx and res.summary_text is None and lm.calls == []


# ------------------------------------------------------------------------------------------------- pre-trim
def test_pretrim_keeps_whole_blocks_from_the_end():
    comp, lm = summariser(trim_input_tokens=12)
    ctx = context()
    res = comp.compact(ctx)
    # blocks of 1..7 from the end: [7] 5 tokens, [5, 6] 8 more = 13 > 12; the message before is a tool result,
    # so nothing partial is added: the summariser sees message 7 only, and never the rule.
    assert list(res.summariser_input) == [ctx[7]]
    assert lm.calls[0].endswith("Conversation:\nAssistant: The inbox has three messages.\nassistant:")
    assert RULE not in lm.calls[0]
    assert res.details["input_tokens"] == 5 and res.details["trimmed_messages"] == 6


def test_pretrim_keeps_the_end_of_one_plain_message():
    ctx = context()
    received, partial = trim_to_last_tokens(ctx[1:8], 24, WS)
    # [7] 5 + [5, 6] 8 + [3, 4] 9 = 22; 2 tokens left for message 2 ("Please triage the inbox.")
    assert partial and received[0].content == "the inbox." and received[0].meta == ctx[2].meta
    assert received[1:] == ctx[3:8]
    assert trim_to_last_tokens(ctx[1:8], None, WS) == (ctx[1:8], False)
    assert trim_to_last_tokens(ctx[1:8], 34, WS) == (ctx[1:8], False)


# --------------------------------------------------------------------------------------------------- styles
@pytest.mark.parametrize("style, preface, marks", [
    ("goal_extract", SUMMARY_PREFIX, ["overall goal", "take the place of the conversation"]),
    ("running", SUMMARY_PREFIX, ["summary of the conversation so far"]),
    ("handoff", HANDOFF_PREFACE, ["different model", "Progress and decisions", "every constraint and user preference",
                                  "Remaining steps", "Critical data"]),
    ("sectioned", CONTINUATION_PREFACE, ["<analysis>", "private", "9. Next step", "6. All user messages"]),
    ("sectioned_secure", CONTINUATION_PREFACE, ["<analysis>", "9. Next step", "security-relevant constraint",
                                                "word for word"]),
    ("constraint_aware", SUMMARY_PREFIX, ["CONSTRAINTS", "word for word", "TASK STATE"]),
])
def test_each_style_sends_its_prompt_and_inserts_the_summary_its_way(style, preface, marks):
    comp, lm = summariser("S.", style=style)
    res = comp.compact(context())
    prompt = lm.calls[0]
    assert prompt.endswith(f"Conversation:\n{TRANSCRIPT_1_7}\nassistant:")
    for mark in marks:
        assert mark in prompt, mark
    note = res.messages[1]
    assert note.content == f"{preface}\nS." and note.role == "user" and note.meta["origin"] == "summary"
    assert comp.name == f"llm_summary:{style}"


def test_sectioned_output_loses_its_scratchpad():
    reply = "<analysis>The user said never to email outside.</analysis>\n<summary>1. Request: send the report</summary>"
    comp, _ = summariser(reply, style="sectioned", ratio=1.0)
    res = comp.compact(context())
    assert res.summary_text == "1. Request: send the report" and res.details["scratchpad_stripped"]
    assert "never" not in res.messages[1].content
    # goal_extract keeps whatever the model wrote
    comp, _ = summariser(reply, style="goal_extract", ratio=1.0)
    assert comp.compact(context()).summary_text == reply


def test_strip_scratchpad_cases():
    assert strip_scratchpad("<analysis>a</analysis> plain") == ("plain", True)
    assert strip_scratchpad("<analysis>cut off by the budget") == ("", True)
    assert strip_scratchpad("<analysis>open <summary>body") == ("body", True)
    assert strip_scratchpad("no tags here") == ("no tags here", False)


def test_running_folds_the_prior_summary_in():
    lm = ScriptedLM(["First summary.", "Second summary."])
    comp, _ = summariser(lm, style="running", keep_last=2)
    first = comp.compact(context()[:8])  # 8 - 2 = 6 is a tool result: the tail is 5..7, the prefix 1..4
    assert first.details["folded_prior"] is False
    assert lm.calls[0].startswith("user: Write a short summary of the conversation so far")
    later = first.messages + [Message("user", "Any news?"), Message("assistant", "None yet.")]
    second = comp.compact(later)
    # the prefix is now [summary, call 5, result 6, message 7]: the summary is folded, the rest rendered
    assert second.details["folded_prior"] is True
    assert lm.calls[1] == sent(
        "Below is the summary of the conversation so far, followed by newer messages. Extend the summary so that "
        "it also covers the newer messages, and reply with the extended summary only.\n\nSummary so far:\n"
        "First summary.\n\nNewer messages:\n"
        'Assistant: read_email {"msg_id": "2"}\n'
        "Tool (read_email): The quarterly report is attached.\n"
        "Assistant: The inbox has three messages.")
    assert second.messages[1].content == f"{SUMMARY_PREFIX}\nSecond summary."
    assert second.messages[2:] == later[-2:]


def test_render_transcript():
    assert render_transcript(context()[3:5]) == "Assistant: list_inbox {}\nTool (list_inbox): Three new messages " \
                                                "from the sales team."


def test_goal_extract_loads_langchain_prompt_where_installed():
    from langchain.agents.middleware.summarization import DEFAULT_SUMMARY_PROMPT

    lm = ScriptedLM(lambda t: "S")
    comp = LLMSummary(lm, counter=WS)  # prompt_source="auto"
    res = comp.compact(context())
    assert res.details["prompt_source"].startswith("langchain==")
    assert res.details["prompt_sha"] == hashlib.sha256(DEFAULT_SUMMARY_PROMPT.encode()).hexdigest()
    assert lm.calls == [sent(DEFAULT_SUMMARY_PROMPT.format(messages=TRANSCRIPT_1_7).rstrip())]
    assert comp.config_hash != summariser()[0].config_hash  # the prompt is part of the configuration
    assert LLMSummary(lm, style="handoff", counter=WS).prompt_source == "project"


# --------------------------------------------------------------------------------------------------- failure
def test_summariser_failure_keeps_the_prefix_and_is_flagged(tmp_path):
    cache = SummaryCache(tmp_path)
    comp = LLMSummary(load_lm("scripted:fail"), counter=WS, prompt_source="project", cache=cache)
    ctx = context()
    res = comp.compact(ctx)
    assert res.messages == ctx and res.summary_text is None
    assert res.details["summary_failed"] is True and "always fails" in res.details["error"]
    assert list(res.summariser_input) == ctx[1:8]
    assert cache.writes == 0 and len(cache) == 0  # a failure is never cached


# ----------------------------------------------------------------------------------------------------- cache
def test_cache_hit_skips_the_model_and_gives_the_same_context(tmp_path):
    cache = SummaryCache(tmp_path)
    comp, lm = summariser("S1", cache=cache)
    a = comp.compact(context())
    b = comp.compact(context())
    assert len(lm.calls) == 1 and a.messages == b.messages
    assert (a.details["cache"], b.details["cache"]) == ("miss", "hit")
    assert cache.stats() == {"hits": 1, "misses": 1, "writes": 1, "entries": 1}
    comp.compact(context(), keep_last=2)  # another cut is another input
    assert cache.misses == 2 and len(lm.calls) == 2


def test_pf6_calls_are_episodes_times_summarisers_not_actors(tmp_path):
    cache = SummaryCache(tmp_path)
    episodes = [context(), context()[:11] + [Message("user", "Delete the old tickets.")]]
    comps = [summariser("x", style=s, cache=cache)[0] for s in ("goal_extract", "handoff")]
    for _actor in range(3):  # every actor reads the same compacted contexts
        for ep in episodes:
            for comp in comps:
                comp.compact(ep)
    assert sum(c.calls for c in comps) == 4 == cache.misses and cache.hits == 8


def test_cache_never_overwrites(tmp_path):
    cache = SummaryCache(tmp_path)
    key = cache_key("abc", context())
    assert cache.put(key, {"raw": "first"}) is True
    assert cache.put(key, {"raw": "second"}) is False
    assert cache.get(key) == {"raw": "first"} and cache.writes == 1 and len(cache) == 1
    assert key in cache and SummaryCache(tmp_path).get(key) == {"raw": "first"}  # on disk, not in memory


def test_cache_key_depends_on_config_messages_origins_and_extra():
    ctx = context()
    k = cache_key("abc", ctx)
    assert k == cache_key("abc", context()) and len(k) == 64
    assert k != cache_key("abd", ctx) and k != cache_key("abc", ctx[:-1]) and k != cache_key("abc", ctx, keep_last=2)
    relabelled = ctx[:1] + [Message("user", RULE, meta={"origin": "summary"})] + ctx[2:]
    assert k != cache_key("abc", relabelled)  # origin decides what running folds


def test_cache_bad_input(tmp_path):
    cache = SummaryCache(tmp_path)
    with pytest.raises(ValueError, match="64 lower-case hex"):
        cache.get("../etc/passwd")
    with pytest.raises(ValueError, match="must be a dict"):
        cache.put("a" * 64, ["x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="config_hash"):
        cache_key("", [])
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        SummaryCache(tmp_path / "f")
    bad = "b" * 64
    (tmp_path / "bb").mkdir()
    (tmp_path / "bb" / f"{bad}.json").write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        cache.get(bad)


# ------------------------------------------------------------------------------------------------ bad config
@pytest.mark.parametrize("kw, match", [
    ({"style": "bullet"}, "style must be one of"),
    ({"ratio": 0}, "ratio"), ({"ratio": 1.5}, "ratio"), ({"ratio": True}, "ratio"),
    ({"keep_last": 0}, "keep_last"), ({"trim_input_tokens": 0}, "trim_input_tokens"),
    ({"prompt_source": "langmem"}, "prompt_source"), ({"cache": "dir"}, "cache"),
])
def test_bad_config_is_a_value_error(kw, match):
    with pytest.raises(ValueError, match=match):
        LLMSummary(ScriptedLM(lambda t: "x"), counter=WS, **kw)
    with pytest.raises(ValueError, match="agentmill LM"):
        LLMSummary(object(), counter=WS)


def test_config_hash_tracks_the_configuration():
    h = {s: summariser(style=s)[0].config_hash for s in STYLES}
    assert len(set(h.values())) == len(STYLES)
    assert summariser()[0].config_hash == summariser()[0].config_hash != summariser(ratio=0.5)[0].config_hash


# --------------------------------------------------------------------------------------------- real SmolLM2
@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_summarises_one_short_prefix():
    lm = load_lm("hf:smollm2")
    comp = LLMSummary(lm, style="constraint_aware", ratio=0.25, trim_input_tokens=4000)
    res = comp.compact(context())
    d = res.details
    assert not d["summary_failed"] and d["max_new_tokens"] <= 64
    assert res.messages[1].meta["origin"] == "summary" and res.summary_text
    assert d["achieved_ratio"] > 0


# ------------------------------------------------------------------------------------------------ name and label
def test_one_style_on_two_lms_shares_the_name_but_not_the_label_or_hash():
    a = LLMSummary(ScriptedLM(lambda t: "A", spec="scripted:a"), style="handoff", counter=WS, prompt_source="project")
    b = LLMSummary(ScriptedLM(lambda t: "B", spec="scripted:b"), style="handoff", counter=WS, prompt_source="project")
    # the name stays llm_summary:<style>: it is hashed into config_hash, hence into every cache and resume key
    assert a.name == b.name == "llm_summary:handoff"
    assert (a.label, b.label) == ("llm_summary:handoff@scripted:a", "llm_summary:handoff@scripted:b")
    assert a.lm_spec == "scripted:a" and a.config_hash != b.config_hash
    assert a.config_hash == make_config_hash("llm_summary:handoff", **a.config)  # the label is not in the hash
    assert a.config["lm"] == "scripted:a"


def test_repeated_carries_the_label_and_a_failed_round():
    ok = Repeated(LLMSummary(ScriptedLM(lambda t: "S", spec="scripted:s"), counter=WS, prompt_source="project"), 2)
    assert ok.label == "repeated(llm_summary:goal_extract@scripted:s)" and ok.lm_spec == "scripted:s"
    assert ok.compact(context()).details["summary_failed"] is False
    bad = Repeated(LLMSummary(load_lm("scripted:fail"), counter=WS, prompt_source="project"), 2)
    res = bad.compact(context())
    assert res.details["summary_failed"] is True and res.messages == context()  # nothing compacted, and said so
