"""Volatile content (W-6): span finding and scrubbing, the tag checks, the content-class domain, and UniqueObs
collection paired row for row with the plain collector."""

from __future__ import annotations

import pytest

from agentmill.methods.world_model.data import collect_keydoor
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.judges import JudgeItem, RuleScorer, exact_match, field_f1
from agentmill.methods.world_model.volatile import (PLACEHOLDER, VolatileDomain, collect_unique, scrub, tag_checks,
                                                    tag_parts, volatile_spans, volatile_values)

OBS = "You take the key.\n-= Hallway =-\nYou see nothing special.\nExits: south.\nYou are carrying a white key."
TAG_A = "[request 6f7de8e5 at 2026-01-04T03:05:41Z]"
TAG_B = "[request b969d91e at 2026-01-04T03:06:02Z]"


def test_spans_and_scrub_by_hand() -> None:
    text = "a\n" + TAG_A
    assert volatile_spans(text) == [(2, 2 + len(TAG_A))]
    assert volatile_values(text) == [TAG_A]
    assert scrub(text) == "a"
    assert scrub(text, PLACEHOLDER) == "a\n<volatile>"
    assert scrub("no tags here") == "no tags here"
    # a malformed tag is still volatile (scrubbed), and a missing closing bracket runs to the line end
    assert scrub("a\n[request 4d8b at 2026") == "a"


def test_tag_parts_strict_form() -> None:
    assert tag_parts(TAG_A) == ("6f7de8e5", "2026-01-04T03:05:41Z")
    assert tag_parts("[request 6f7de8 at 2026-01-04T03:05:41Z]") is None  # 6 hex digits
    assert tag_parts("[request 6f7de8e5 at 2026-13-04T03:05:41Z]") is None  # month 13
    assert tag_parts("[request 6F7DE8E5 at 2026-01-04T03:05:41Z]") is None  # the wrapper writes lower case


def test_tag_checks_fresh_stale_copied() -> None:
    cur = OBS + "\n" + TAG_A
    assert tag_checks(OBS + "\n" + TAG_B, cur) == {"present": True, "valid": True, "fresh": True, "later": True,
                                                    "copied": False, "ok": True}
    stale = tag_checks(cur, cur)
    assert stale["valid"] and not stale["fresh"] and stale["copied"] and not stale["ok"]
    same_time = tag_checks(OBS + "\n[request 00000000 at 2026-01-04T03:05:41Z]", cur)
    assert not same_time["fresh"] and not same_time["copied"]
    assert tag_checks(None, cur)["ok"] is False
    assert tag_checks(OBS, cur)["present"] is False
    assert tag_checks(OBS + "\n" + TAG_B + "\n" + TAG_B, cur)["present"] is False  # two tags


def test_volatile_domain_scores_objective_content_only() -> None:
    vd, kd = VolatileDomain(), KeyDoorDomain()
    gt, pred = OBS + "\n" + TAG_B, OBS + "\n[request 12345678 at 2026-01-04T03:06:30Z]"
    assert vd.parse(gt).facts == kd.parse(OBS).facts
    assert field_f1(vd, pred, gt) == 1.0
    assert field_f1(kd, pred, gt) < 1.0  # unscrubbed, the tag lines are unmatched facts
    assert exact_match(pred, gt) == 0.0
    assert exact_match(scrub(pred, PLACEHOLDER), scrub(gt, PLACEHOLDER)) == 1.0
    scorer = RuleScorer(vd)
    fresh = scorer.score_observation(pred, JudgeItem(pred, gt, (OBS + "\n" + TAG_A,), None))
    stale = scorer.score_observation(OBS + "\n" + TAG_A, JudgeItem("", gt, (OBS + "\n" + TAG_A,), None))
    assert fresh.factuality == stale.factuality == 5.0
    assert fresh.realism > stale.realism
    untagged = scorer.score_observation(OBS, JudgeItem("", gt, (OBS + "\n" + TAG_A,), None))
    assert untagged.format < fresh.format  # the schema asks for exactly one tag


def test_collect_unique_pairs_with_plain_collection() -> None:
    tasks = [(11, "train"), (12, "test")]
    plain = collect_keydoor(tasks, 2, seed=3).rows
    uniq = collect_unique(tasks, 2, seed=3).rows
    assert len(plain) == len(uniq) > 0
    for a, b in zip(plain, uniq):
        assert (a.episode_id, a.t, a.action, a.changed, a.diff) == (b.episode_id, b.t, b.action, b.changed, b.diff)
        assert scrub(b.obs) == a.obs and scrub(b.next_obs) == a.next_obs
        assert len(volatile_values(b.next_obs)) == 1 and tag_parts(volatile_values(b.next_obs)[0]) is not None
        assert tag_checks(b.next_obs, b.obs)["ok"]  # the real env's own tags are fresh and well formed
    ids = [volatile_values(b.next_obs)[0][9:17] for b in uniq]
    assert len(set(ids)) == len(ids)
    none = collect_unique(tasks, 2, seed=3, p=0.0).rows
    assert [r.next_obs for r in none] == [r.next_obs for r in plain]


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_collect_unique_rejects_bad_p(p: float) -> None:
    with pytest.raises(ValueError, match="p must be"):
        collect_unique([(11, "train")], 1, p=p)
