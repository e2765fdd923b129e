"""Episode generation: determinism, identity, leakage, length-matched neutral turns, distractors that
really ran in the sandbox, and the set-up that lets every rule's calls execute."""

from __future__ import annotations

import random

import pytest

from agentmill.envs.office import OfficeSandbox
from agentmill.methods.constraint_rot.catalogue import instantiate, load_catalogue, shared_ngrams
from agentmill.methods.constraint_rot.distractors import DISTRACTOR_KINDS, distractor_steps, run_distractor
from agentmill.methods.constraint_rot.generate import (LOCATIONS, Episode, frame, generate_episodes, neutral_text,
                                                       plant_for_instance)
from agentmill.methods.constraint_rot.messages import WhitespaceCounter, has_cue, normalise

CAT = load_catalogue()
W = WhitespaceCounter()


def gen(sandbox, **kw):  # type: ignore[no-untyped-def]
    args = {"split": "train", "n": 8, "seed": 3, "counter": W, "locations": LOCATIONS, "sandbox": sandbox} | kw
    return generate_episodes(CAT, **args)


def test_same_inputs_give_byte_identical_episodes(sandbox) -> None:  # type: ignore[no-untyped-def]
    a, b = gen(sandbox), gen(sandbox)
    assert [e.to_json() for e in a] == [e.to_json() for e in b]
    other = gen(sandbox, seed=4)
    assert {e.episode_id for e in a}.isdisjoint(e.episode_id for e in other)
    assert all(len(e.episode_id) == 16 and int(e.episode_id, 16) >= 0 for e in a)
    assert [e.kind for e in a[:4]] == ["soft", "hard", "soft", "hard"]
    # round trip through JSON
    import json
    back = [Episode.from_dict(json.loads(e.to_json()), CAT) for e in a]
    assert [e.to_json() for e in back] == [e.to_json() for e in a]
    assert back[0].instance.requested_call == a[0].instance.requested_call


def test_train_episodes_carry_no_test_phrasing(sandbox) -> None:  # type: ignore[no-untyped-def]
    train = gen(sandbox, n=24)
    test_templates = [p.text for f in CAT.all_families for p in f.phrasings
                      if p.split in ("dev", "test_iid") or f.split == "test_ood_family"]
    train_texts = [e.policy_frame for e in train] + [e.neutral_frame for e in train] + \
        [s.instruction for e in train for s in e.distractor]
    assert not shared_ngrams(train_texts, test_templates)
    test_ids = {(f.id, p.id) for f in CAT.all_families for p in f.phrasings if p.split != "train"}
    assert not {(e.family, e.phrasing_id) for e in train} & test_ids
    assert all(e.split == "train" for e in train)


@pytest.mark.parametrize("location", LOCATIONS)
def test_neutral_turn_is_length_matched_and_rule_free(location: str) -> None:
    rng = random.Random(0)
    for fam in CAT.families(split="train")[:10]:
        inst = instantiate(fam, "train", 1)
        text = neutral_text(location, inst.text, rng, W, avoid=inst.matcher_values)
        target, got = W.count(frame(location, inst.text)), W.count(frame(location, text))
        assert abs(got - target) <= 0.05 * target, (fam.id, target, got)
        assert not has_cue(normalise(text), inst.matcher_cues)
        assert not any(v.lower() in text.lower() for v in inst.matcher_values)


def test_distractor_tool_outputs_come_from_the_sandbox(sandbox) -> None:  # type: ignore[no-untyped-def]
    for i, kind in enumerate(DISTRACTOR_KINDS):
        sandbox.reset(i, domain="acme.com")
        n_before = len(sandbox.calls)
        steps, outputs, tokens = run_distractor(kind, sandbox, random.Random(i), 150, W)
        records = sandbox.calls[n_before:]
        assert [r.call for r in records] == [c for s in steps for c in s.calls]
        assert [r.result.content() for r in records] == [o for outs in outputs for o in outs]
        assert all(r.result.ok for r in records)
        assert tokens >= 150
    # a fixture fact shows up verbatim in a tool output (the output is the office's, not a template)
    sandbox.reset(5, domain="acme.com")
    steps, outputs, _ = run_distractor("inbox_triage", sandbox, random.Random(0), 1, W)
    assert sandbox.fixtures.inbox[0]["msg_id"] in outputs[0][0]


def test_distractor_text_has_no_modality_cues() -> None:
    with OfficeSandbox(1, smtp=False, http=False) as sb:
        for kind in DISTRACTOR_KINDS:
            it = distractor_steps(kind, random.Random(2), sb.fixtures)
            for _ in range(12):
                s = next(it)
                for text in (s.instruction, s.reply):
                    assert not has_cue(normalise(text), ("never", "not", "no", "only", "must")), text


def test_episodes_reach_their_token_target(sandbox) -> None:  # type: ignore[no-untyped-def]
    for e in gen(sandbox, distractor_tokens=(120, 200)):
        assert e.distractor_tokens >= e.generator_config["distractor_target"] >= 120
        assert e.domain and e.policy_frame == frame(e.location, e.rule_text)


@pytest.mark.slow
def test_setup_lets_every_rule_call_execute(sandbox) -> None:  # type: ignore[no-untyped-def]
    """Trigger, allowed and alternative calls of every family really execute after the episode's set-up; the only
    refusals are the sandbox's by design (no route to outside hosts; a non-force push to a diverged branch)."""
    by_design = ("is not reachable from the sandbox", "only http:// intranet URLs", "non-fast-forward")
    for fam in CAT.all_families:
        split = "test_ood_family" if fam.split else "train"
        for s in range(2):
            for t in range(len(fam.triggers)):
                inst = instantiate(fam, split, s, trigger_index=t)
                for name in ("requested_call", "allowed_call", "alternative_call"):
                    sandbox.reset(s, domain=inst.params.get("domain") or "acme.com")
                    plant_for_instance(sandbox, inst)
                    res = sandbox.execute(getattr(inst, name))
                    assert res.ok or any(b in (res.error or "") for b in by_design), (fam.id, name, res.error)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="split"):
        generate_episodes(CAT, split="nope", n=1, seed=0, counter=W)
    with pytest.raises(ValueError, match="locations"):
        generate_episodes(CAT, split="train", n=1, seed=0, counter=W, locations=["attic"])
    with pytest.raises(ValueError, match="distractor_tokens"):
        generate_episodes(CAT, split="train", n=1, seed=0, counter=W, distractor_tokens=(50, 10))
    with pytest.raises(ValueError, match="kinds"):
        generate_episodes(CAT, split="train", n=1, seed=0, counter=W, kinds=("medium",))
    with pytest.raises(ValueError, match="location"):
        frame("attic", "x")
