"""Fresh parameter values for the organism's SFT episodes (recipe v4 candidate, ``organism/values.py``)."""

from __future__ import annotations

import random
import re

import pytest

from agentmill.methods.constraint_rot.catalogue import instantiate, load_catalogue, with_params
from agentmill.methods.constraint_rot.generate import generate_episodes
from agentmill.methods.constraint_rot.messages import WhitespaceCounter
from agentmill.methods.constraint_rot.organism import build_sft_dataset
from agentmill.methods.constraint_rot.organism.values import INTEGER, KEEP, PERSON, TIME, FreshValues
from agentmill.methods.constraint_rot.schema import luhn_ok, ssn_synthetic

CAP = 1500  # whitespace tokens, as in test_organism_data


@pytest.fixture(scope="module")
def cat():
    return load_catalogue()


@pytest.fixture(scope="module")
def drawn(cat):
    """(train instance, fresh instance) for 6 instances of every train family, one generator."""
    fv = FreshValues(cat)
    rng = random.Random(0)
    pairs = [(inst, fv(inst, rng)) for f in cat.families(split="train") for s in range(6)
             for inst in [instantiate(f, "train", s)]]
    return fv, pairs


def test_fresh_instances_mean_the_same(drawn):
    """Same phrasing, trigger and near-miss; the trigger still violates; the near-miss and the alternative do not."""
    _, pairs = drawn
    for old, new in pairs:
        assert (new.phrasing_id, new.trigger_index, new.allowed_index) == (
            old.phrasing_id, old.trigger_index, old.allowed_index)
        assert new.violates(new.requested_call), (new.rule_id, new.params)
        assert not new.violates(new.allowed_call), (new.rule_id, new.params)
        assert not new.violates(new.alternative_call), (new.rule_id, new.params)


def test_values_are_new_and_never_held_out(cat, drawn):
    fv, pairs = drawn
    held_any, pool_words = set(), set()
    for f in cat.families():
        for spec in f.params.values():
            for split, pool in (spec.pools or {}).items():
                pool_words |= {w.lower() for v in pool for w in re.findall(r"[A-Za-z]+", str(v))}
                if split != "train" or f.split == "test_ood_family":
                    held_any |= set(map(str, pool))
    changed = 0
    for old, new in pairs:
        fam = old.family
        own_held = {str(v) for spec in fam.params.values() for s, pool in (spec.pools or {}).items()
                    if s != "train" for v in pool}
        for name, spec in fam.params.items():
            if spec.pools is None:
                continue
            v, was = new.params[name], old.params[name]
            if v == was:
                continue
            changed += 1
            assert v not in own_held, (fam.id, name, v)
            if not (TIME.match(v) or INTEGER.match(v)):
                assert v not in held_any, (fam.id, name, v)
            if PERSON.match(was):
                assert not {w.lower() for w in v.split()} & pool_words, v
            if spec.check == "luhn":
                assert len(v) == 16 and v.startswith("4") and luhn_ok(v)
            if spec.check == "ssn":
                assert ssn_synthetic(v) and v[4:6] != "00" and v[7:] != "0000"
    assert changed > 0.8 * sum(p.pools is not None for o, _ in pairs for p in o.family.params.values())
    assert fv.fallbacks <= 0.1 * len(pairs)


def test_person_names_and_hosts_always_change(drawn):
    """The shapes that carry the memorised identity (names, hosts) are replaced in every instance that did not fall
    back; the kept pairs (a diagnosis) never are."""
    _, pairs = drawn
    for old, new in pairs:
        if new is old:  # fallback
            continue
        for name, was in old.params.items():
            if old.family.params[name].pools is None:
                continue
            if (old.rule_id, name) in KEEP:
                assert new.params[name] == was
            elif PERSON.match(was) or re.fullmatch(r"[a-z0-9-]+\.(example|com|io|biz|net|org)", was):
                assert new.params[name] != was, (old.rule_id, name)


def test_equal_values_stay_equal_and_draws_are_deterministic(cat):
    fv = FreshValues(cat)
    a = fv.draw({"p": "atlas", "q": "atlas", "r": "beacon", "t1": "09:00", "t2": "17:00", "n1": "50", "n2": "180"},
                {}, random.Random(3))
    b = fv.draw({"p": "atlas", "q": "atlas", "r": "beacon", "t1": "09:00", "t2": "17:00", "n1": "50", "n2": "180"},
                {}, random.Random(3))
    assert a == b and a is not None
    assert a["p"] == a["q"] != a["r"]
    assert a["t1"] < a["t2"] and int(a["n1"]) < int(a["n2"])  # one shift, one factor: order kept
    assert a["t1"] != "09:00" and a["n1"] != "50"


def test_with_params_rerenders_text_and_derived_values(cat):
    fam = next(f for f in cat.families(split="train") if f.id == "mail.external_domain")
    inst = instantiate(fam, "train", 0)
    new = with_params(inst, {"domain": "zovira.com", "outside": "plumex.biz"})
    assert new.params["outsider"] == "contracts@plumex.biz" and new.params["insider"] == "legal@zovira.com"
    assert "acme.com" not in new.text and "northwind.io" not in new.text
    assert new.requested_call.arguments != inst.requested_call.arguments
    with pytest.raises(ValueError, match="pool parameters"):
        with_params(inst, {"domain": "zovira.com"})


def test_generate_episodes_hook_keeps_the_other_draws(cat):
    kw = dict(split="train", n=6, seed=4, distractor_tokens=(20, 40), early_probe=0.0, counter=WhitespaceCounter())
    plain = generate_episodes(cat, **kw)
    fresh = generate_episodes(cat, values=FreshValues(cat), **kw)
    assert [(e.family, e.phrasing_id, e.location, e.request) for e in plain] == \
        [(e.family, e.phrasing_id, e.location, e.request) for e in fresh]
    assert sum(a.params != b.params for a, b in zip(plain, fresh)) >= 4
    for e in fresh:
        assert e.instance.text in e.policy_frame and e.rule_text == e.instance.text


def test_sft_data_with_fresh_values(cat):
    """The v4 data pass the leakage guard; no request repeats a train name; the unpaired/paired data without the
    option are untouched (their manifests are what v1–v3 adapters are addressed by)."""
    kw = dict(n=16, seed=0, counter=WhitespaceCounter(), max_tokens=CAP, paired=True)
    fresh = build_sft_dataset(cat, fresh_values=True, **kw)
    plain = build_sft_dataset(cat, **kw)
    assert [e.kind for e in fresh] == [e.kind for e in plain]
    train_names = {str(v) for f in cat.families() for spec in f.params.values()
                   for v in (spec.pools or {}).get("train", ()) if PERSON.match(str(v))}
    for e in fresh:
        request = e.messages[-1]["content"]
        assert not any(n in request for n in train_names), request
    assert sum(a.messages[-1] != b.messages[-1] for a, b in zip(fresh, plain)) >= 8
