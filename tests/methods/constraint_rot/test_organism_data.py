"""SFT data for the model organism: mixture, determinism, line-format targets with
exact args, no test-split text or values, instinct variant, length caps."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from agentmill.methods.constraint_rot.catalogue import load_catalogue, shared_ngrams
from agentmill.methods.constraint_rot.grader import is_refusal
from agentmill.methods.constraint_rot.messages import WhitespaceCounter
from agentmill.methods.constraint_rot.organism import (DEFAULT_MIXTURE, LeakageError, Mixture, SFTExample,
                                                       build_sft_dataset, check_sft_leakage, manifest_hash,
                                                       write_jsonl)
from agentmill.core.types import ToolCall
from agentmill.lm.chat_tools import template_messages
from agentmill.methods.constraint_rot.organism.data import _test_rule_texts, call_line

LINE = re.compile(r"^(?:CALL (\w+) (\{.*\})|REPLY (\S.*))$")
CAP = 1500  # whitespace tokens; the SmolLM2 default cap of 768 is exercised in the length test


@pytest.fixture(scope="module")
def cat():
    return load_catalogue()


@pytest.fixture(scope="module")
def data100(cat):
    return build_sft_dataset(cat, n=100, seed=0, counter=WhitespaceCounter(), max_tokens=CAP)


@pytest.mark.parametrize("args", [{}, {"to": "ana@example.com", "n": 3}, {"body": "café ✓ \"q\"\n", "x": [1.5, None]},
                                  {"nested": {"b": 1, "a": [True]}}])
def test_call_line_is_the_servers_rendering(args):
    call = ToolCall("c1", "send_email", args)
    old_copy = f"CALL send_email {json.dumps(args, ensure_ascii=False)}"  # what data.py rendered before
    served = template_messages([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "send_email", "arguments": json.dumps(args)}}]}],
        None, tool_role=True)
    assert call_line(call) == old_copy == served[0]["content"]


def test_mixture_counts_exact():
    assert DEFAULT_MIXTURE.counts(100) == {"present": 35, "absent": 25, "near_miss": 12, "irrelevant": 12,
                                           "paraphrase": 8, "two_rules": 8}
    assert sum(DEFAULT_MIXTURE.counts(7).values()) == 7
    with pytest.raises(ValueError, match="sum to 1"):
        Mixture(present=0.5)


@pytest.mark.slow
def test_mixture_proportions_n100(data100):
    got = Counter(e.kind for e in data100)
    for kind, share in (("present", .35), ("absent", .25), ("near_miss", .12), ("irrelevant", .12),
                        ("paraphrase", .08), ("two_rules", .08)):
        assert abs(got[kind] - share * 100) <= 1, (kind, got)
    compliant = [e for e in data100 if e.kind in ("present", "paraphrase", "two_rules")]
    alt = sum(e.meta["target_kind"] == "alternative" for e in compliant)
    assert 0.5 <= alt / len(compliant) <= 0.9
    locs = Counter(e.location for e in data100 if e.kind == "present")
    assert set(locs) == {"memory_block", "memory_tool", "policy_doc_tool", "onboarding_turn", "system",
                         "summary_block", "card"}
    assert "first_user_turn" not in {e.location for e in data100}


@pytest.mark.slow
def test_targets_parse_with_exact_args(data100):
    for e in data100:
        m = LINE.match(e.target)
        assert m and "\n" not in e.target, e.target
        assert e.messages[-1]["role"] == "user"
        if m.group(1):
            args = json.loads(m.group(2))
            tk = e.meta["target_kind"]
            assert tk in ("alternative", "allowed", "requested")
            request = e.messages[-1]["content"]
            if tk in ("requested", "allowed"):
                # recipient / amount / path copied from the request
                for key in ("to", "amount", "path", "recipient"):
                    if key in args and isinstance(args[key], (str, int, float)):
                        assert str(args[key]).rstrip("0").rstrip(".") in request or str(args[key]) in request, \
                            (key, args, request)
        else:
            assert is_refusal(m.group(3)), e.target


@pytest.mark.slow
def test_targets_match_the_rule(data100):
    for e in data100:
        if e.kind == "absent":
            assert e.meta["target_kind"] == "requested"
        if e.kind in ("irrelevant",):
            assert e.meta["target_kind"] == "requested" and e.meta["other_family"] != e.family
        if e.kind == "near_miss":
            assert e.meta["target_kind"] == "allowed"
        if e.meta["target_kind"] == "refusal":
            assert "rule" in e.target


@pytest.mark.slow
def test_no_labels_no_revocation(data100):
    for e in data100:
        for m in e.messages:
            assert "meta" not in m and set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"}
        text = " ".join(m["content"] for m in e.messages).lower()
        assert "no longer applies" not in text and "operator update" not in text


@pytest.mark.slow
def test_no_test_text_or_values(cat, data100):
    rule_msgs = [m["content"] for e in data100 for m in e.messages if m["role"] != "tool"]
    assert not shared_ngrams(rule_msgs, _test_rule_texts(cat), n=8)
    check_sft_leakage(cat, [], data100)


def test_leakage_guard_raises(cat):
    test_text = _test_rule_texts(cat)[0]
    with pytest.raises(LeakageError, match="8-gram"):
        check_sft_leakage(cat, [test_text])


def test_deterministic_by_seed_and_jsonl(cat, tmp_path):
    a = build_sft_dataset(cat, n=6, seed=3, counter=WhitespaceCounter(), max_tokens=CAP)
    b = build_sft_dataset(cat, n=6, seed=3, counter=WhitespaceCounter(), max_tokens=CAP)
    c = build_sft_dataset(cat, n=6, seed=4, counter=WhitespaceCounter(), max_tokens=CAP)
    assert [e.to_json() for e in a] == [e.to_json() for e in b]
    assert manifest_hash(a) == manifest_hash(b) != manifest_hash(c)
    h = write_jsonl(a, tmp_path / "sft.jsonl")
    assert h == manifest_hash(a)
    back = [SFTExample.from_dict(json.loads(line)) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert manifest_hash(back) == h


def test_instinct_replaces_half_of_absent_hard(cat):
    mix = Mixture(present=0.0, absent=1.0, near_miss=0.0, irrelevant=0.0, paraphrase=0.0, two_rules=0.0)
    plain = build_sft_dataset(cat, n=8, seed=1, mixture=mix, counter=WhitespaceCounter(), max_tokens=CAP)
    inst = build_sft_dataset(cat, n=8, seed=1, mixture=mix, counter=WhitespaceCounter(), max_tokens=CAP,
                             instinct=True)
    hard = [i for i, e in enumerate(plain) if e.meta["kind_of_rule"] == "hard"]
    assert len(hard) == 4 and all(plain[i].target.startswith("CALL ") for i in range(8))
    refused = [i for i in range(8) if inst[i].meta["target_kind"] == "instinct_refusal"]
    assert len(refused) == 2 and set(refused) <= set(hard)
    assert all(is_refusal(inst[i].target.removeprefix("REPLY ")) for i in refused)
    soft = [i for i in range(8) if i not in hard]
    assert all(inst[i].target == plain[i].target for i in soft)


def test_length_cap(cat):
    wide = build_sft_dataset(cat, n=6, seed=2, counter=WhitespaceCounter(), max_tokens=CAP)
    cap = min(e.meta["n_tokens"] for e in wide) + 40
    try:
        tight = build_sft_dataset(cat, n=6, seed=2, counter=WhitespaceCounter(), max_tokens=cap)
    except ValueError as err:
        assert "max_tokens" in str(err)
    else:
        assert all(e.meta["n_tokens"] <= cap for e in tight)
        assert sum(e.meta["dropped_steps"] for e in tight) > 0
    with pytest.raises(ValueError, match="max_tokens"):
        build_sft_dataset(cat, n=2, seed=2, counter=WhitespaceCounter(), max_tokens=100)


def test_exact_measure_replaces_the_estimate(cat):
    """With ``measure`` the cap applies to that count (the trainer's exact length), not the whitespace estimate."""
    def measure(ex):
        return 100 * len(ex.messages)

    wide = build_sft_dataset(cat, n=6, seed=2, counter=WhitespaceCounter(), max_tokens=CAP)
    cap = 100 * (min(len(e.messages) for e in wide) - 2)
    tight = build_sft_dataset(cat, n=6, seed=2, counter=WhitespaceCounter(), max_tokens=cap, measure=measure)
    assert all(e.meta["n_tokens"] == measure(e) <= cap for e in tight)
    assert all(t.meta["dropped_steps"] > 0 for t in tight)
    assert [t.target for t in tight] == [w.target for w in wide]
    with pytest.raises(ValueError, match="max_tokens=100"):
        build_sft_dataset(cat, n=2, seed=2, counter=WhitespaceCounter(), max_tokens=100, measure=measure)


def test_bad_input(cat):
    with pytest.raises(ValueError, match="n must"):
        build_sft_dataset(cat, n=0, seed=0)


# -- recipe v3: contrastive groups ------------------------------------------------------------------------------------
def _differing(a: SFTExample, b: SFTExample) -> list[int]:
    assert len(a.messages) == len(b.messages), (a.kind, b.kind)
    return [i for i, (x, y) in enumerate(zip(a.messages, b.messages)) if x != y]


@pytest.fixture(scope="module")
def paired16(cat):
    return build_sft_dataset(cat, n=16, seed=0, counter=WhitespaceCounter(), max_tokens=CAP, paired=True)


def test_paired_groups_share_everything_but_the_slot_or_the_trigger(cat, paired16):
    groups = [paired16[g:g + 4] for g in range(0, 16, 4)]
    assert [[e.kind for e in g] for g in groups] == [
        ["present", "absent", "near_miss", "irrelevant"], ["present", "absent", "near_miss", "paraphrase"],
        ["present", "absent", "near_miss", "irrelevant"], ["present", "absent", "near_miss", "two_rules"]]
    for g, members in enumerate(groups):
        present, absent, near, fourth = members
        assert {e.meta["group"] for e in members} == {g}
        assert len({e.meta["episode_id"] for e in members}) == 1 and len({e.family for e in members}) == 1
        inst_targets = {e.meta["target_kind"] for e in members}
        assert absent.meta["target_kind"] == "requested" and near.meta["target_kind"] == "allowed"
        assert present.meta["target_kind"] in ("alternative", "refusal") and len(inst_targets) >= 3
        # absent vs near_miss: the policy slot and the trigger differ, nothing else (same transcript, same drops)
        diff = _differing(absent, near)
        assert diff[-1] == len(near.messages) - 1 and len(diff) == 2, diff
        slot = diff[0]
        if present.location not in ("summary_block", "card"):
            assert present.location == near.location  # the rule sits where the label says
            assert _differing(present, absent) == [slot]  # rule vs its length-matched neutral turn only
            assert _differing(present, near) == [len(near.messages) - 1]  # the trigger only
        assert present.messages[-1] == absent.messages[-1] != near.messages[-1]
        if fourth.kind == "irrelevant":
            assert _differing(fourth, absent) == [slot] and fourth.target == absent.target
    assert len({m.meta["episode_id"] for m in paired16}) == 4


def test_paired_group_drops_the_same_steps(cat, paired16):
    cap = max(e.meta["n_tokens"] for e in paired16) - 60
    tight = build_sft_dataset(cat, n=16, seed=0, counter=WhitespaceCounter(), max_tokens=cap, paired=True)
    assert all(e.meta["n_tokens"] <= cap for e in tight)
    for g in range(0, 16, 4):
        members = [e for e in tight[g:g + 4] if e.location not in ("summary_block", "card")]
        assert len({e.meta["dropped_steps"] for e in members}) == 1, [e.meta["dropped_steps"] for e in members]
    assert sum(e.meta["dropped_steps"] for e in tight) > 0


def test_paired_truncates_the_last_group_and_is_deterministic(cat, paired16):
    ten = build_sft_dataset(cat, n=10, seed=0, counter=WhitespaceCounter(), max_tokens=CAP, paired=True)
    assert [e.kind for e in ten[8:]] == ["present", "absent"]
    assert [e.to_json() for e in ten] == [e.to_json() for e in paired16[:10]]
    plain = build_sft_dataset(cat, n=16, seed=0, counter=WhitespaceCounter(), max_tokens=CAP)
    assert "group" not in plain[0].meta and manifest_hash(plain) != manifest_hash(paired16)


def test_leakage_guard_on_the_other_familys_values(cat):
    """An ``irrelevant``/``two_rules`` request is built from its own family only: a short test-only value of the
    other family there is a coincidence (found building recipe v3: '40'), and so is one that another family uses in
    training ('T-1004'); a distinctive value held out everywhere is still refused, and the own family's short values
    are refused as before."""
    from agentmill.methods.constraint_rot.organism.data import _distinctive, test_only_values

    held = test_only_values(cat)

    def pick(distinctive: bool) -> tuple[str, str]:
        for f in cat.families():
            vals = sorted(v for v in test_only_values(cat, [f.id]) & held if _distinctive(v) == distinctive)
            if vals:
                return f.id, vals[0]
        raise AssertionError("catalogue has no such test-only value")

    (short_fam, short), (long_fam, long) = pick(False), pick(True)
    own = next(f.id for f in cat.families() if f.id not in (short_fam, long_fam)
               and short not in test_only_values(cat, [f.id]) and long not in test_only_values(cat, [f.id]))

    def ex(request: str, family: str, other: str) -> SFTExample:
        return SFTExample(({"role": "user", "content": request},), (), "REPLY ok", "irrelevant", family, "system",
                          {"other_family": other})

    check_sft_leakage(cat, [], [ex(f"Please pay the {short} invoice.", own, short_fam)])
    with pytest.raises(LeakageError, match=re.escape(long)):
        check_sft_leakage(cat, [], [ex(f"Please send {long} now.", own, long_fam)])
    with pytest.raises(LeakageError, match="test-only value"):
        check_sft_leakage(cat, [], [ex(f"Please pay the {short} invoice.", short_fam, own)])
    # tickets.no_delete holds T-1004 out (test_iid); sales.discount_tier trains on it: not leakage in its request
    assert "T-1004" in test_only_values(cat, ["tickets.no_delete"]) and "T-1004" not in held
    check_sft_leakage(cat, [], [ex("Apply the discount on T-1004.", "sales.discount_tier", "tickets.no_delete")])
