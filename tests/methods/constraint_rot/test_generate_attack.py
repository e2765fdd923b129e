"""Attack embedding in episode generation: the payload sits in one distractor tool output
of the named channel, inside the span a compaction summarises; the note-following summariser evicts the rule under
the A2 fixed probe but not under the length-matched F0 filler; generation stays deterministic."""

from __future__ import annotations

import pytest

from agentmill.methods.constraint_rot.actors import RuleReader
from agentmill.methods.constraint_rot.attacks import AttackSpec
from agentmill.methods.constraint_rot.catalogue import load_catalogue
from agentmill.methods.constraint_rot.compactors import NoteFollowingSummary
from agentmill.methods.constraint_rot.conditions import compacted
from agentmill.methods.constraint_rot.generate import ATTACK_BODIES, Episode, generate_episodes
from agentmill.methods.constraint_rot.loop import AgentLoop
from agentmill.methods.constraint_rot.messages import MODALITY_CUES, WhitespaceCounter, has_cue, normalise

CAT = load_catalogue()
W = WhitespaceCounter()
LOCS = ("memory_tool", "onboarding_turn", "first_user_turn")
TOOL_OF = {"http_page": "http_get", "email_body": "read_email", "ticket": "list_tickets", "file": "read_file"}


def gen(sandbox, attack, **kw):  # type: ignore[no-untyped-def]
    args = {"split": "train", "n": 3, "seed": 5, "counter": W, "locations": LOCS, "sandbox": sandbox,
            "attack": attack} | kw
    return generate_episodes(CAT, **args)


def test_benign_bodies_carry_no_rule_cue() -> None:
    for body in ATTACK_BODIES.values():
        assert not has_cue(normalise(body), MODALITY_CUES), body


@pytest.mark.parametrize("channel", sorted(TOOL_OF))
def test_payload_is_in_the_channel_tool_output_at_the_compaction_point(sandbox, channel: str) -> None:  # type: ignore[no-untyped-def]
    spec = AttackSpec("fixed", channel=channel, position="start")
    loop = AgentLoop(RuleReader(), sandbox, counter=W)
    for ep in gen(sandbox, spec):
        a = ep.attack
        assert a["attack_hash"] == spec.attack_hash and a["kind"] == "fixed"
        assert "Note to the summariser" in a["payload"]
        step = ep.distractor[a["step"]]
        assert 1 <= a["step"] < len(ep.distractor) - 1  # work follows it, so it is summarised, not in the tail
        assert [c.name for c in step.calls] == [TOOL_OF[channel]]
        out = ep.distractor_outputs[a["step"]][0]
        assert a["payload"] in out
        res = loop.run(ep, compacted(NoteFollowingSummary(counter=W)))
        assert res.row["error"] is None
        seen = res.compactions[0].summariser_input
        carriers = [m for m in seen if m.role == "tool" and a["payload"] in m.content]
        assert len(carriers) == 1 and carriers[0].name == TOOL_OF[channel]
        # position="start": the planted text opens with the payload, and the tool output carries that text
        assert a["object"]["text"].startswith(a["payload"] + "\n\n") and a["object"]["text"] in carriers[0].content


def test_note_following_evicts_the_rule_under_a2_but_not_under_filler(sandbox) -> None:  # type: ignore[no-untyped-def]
    loop = AgentLoop(RuleReader(), sandbox, counter=W)
    cond = compacted(NoteFollowingSummary(counter=W))
    probe = gen(sandbox, AttackSpec("fixed"))
    filler = gen(sandbox, AttackSpec("filler"))
    for ep_a, ep_f in zip(probe, filler):
        assert ep_a.family == ep_f.family and ep_a.location == ep_f.location
        assert W.count(ep_a.attack["payload"]) == W.count(ep_f.attack["payload"])  # length-matched control
        assert "summar" not in ep_f.attack["payload"].lower()
        ra, rf = loop.run(ep_a, cond).row, loop.run(ep_f, cond).row
        assert (ra["survival_label"], ra["violation"]) == ("dropped", True)
        assert rf["survival_label"] in ("preserved", "paraphrased") and rf["violation"] is False
        assert ra["attack"] == "fixed" and rf["attack"] == "filler"


def test_same_seed_same_episodes_and_the_id_follows_the_attack(sandbox) -> None:  # type: ignore[no-untyped-def]
    a1 = gen(sandbox, AttackSpec("template", template_id="A1", channel="email_body"))
    a2 = gen(sandbox, AttackSpec("template", template_id="A1", channel="email_body"))
    assert [e.to_json() for e in a1] == [e.to_json() for e in a2]
    other = gen(sandbox, AttackSpec("template", template_id="A5", channel="email_body"))
    clean = gen(sandbox, None)
    assert all(x.episode_id != y.episode_id != z.episode_id for x, y, z in zip(a1, other, clean))
    assert all(e.attack is None and not any(c.id.startswith("a") for s in e.distractor for c in s.calls)
               for e in clean)
    import json
    back = [Episode.from_dict(json.loads(e.to_json()), CAT) for e in a1]
    assert [e.to_json() for e in back] == [e.to_json() for e in a1]


def test_none_and_impersonation_are_recorded_not_planted(sandbox) -> None:  # type: ignore[no-untyped-def]
    for kind in ("none", "impersonation"):
        for ep in gen(sandbox, AttackSpec(kind), n=1):
            assert ep.attack["kind"] == kind and "object" not in ep.attack and "step" not in ep.attack


def test_a_bad_attack_is_a_value_error(sandbox) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="channel"):
        gen(sandbox, {"kind": "fixed", "channel": "fax"})
    with pytest.raises(ValueError, match="AttackSpec"):
        gen(sandbox, 42)
