"""State keys and the UniqueObs scrub pattern."""

from __future__ import annotations

import hashlib
import re

import pytest

from agentmill.methods.g2po.keys import (UNIQUE_OBS_PATTERN, ExactKey, FieldsKey, HashKey, ScrubbedKey,
                                         cluster_similar)


def test_exact_key_normalises_whitespace_only_when_asked() -> None:
    assert ExactKey()("  -= Kitchen =-\n\n  Exits:  north ", {}) == "-= Kitchen =- Exits: north"
    assert ExactKey(normalize_ws=False)("a  b", {}) == "a  b"
    with pytest.raises(TypeError, match="must be str"):
        ExactKey()(["not", "text"], {})  # type: ignore[arg-type]


def test_unique_obs_pattern_matches_the_wrapper_field_and_scrubbing_restores_the_text() -> None:
    base = "-= Kitchen =-\nExits: north"
    wrapped = f"{base}\n[request 0a1b2c3d at 2026-06-22T10:11:12Z]"
    assert re.search(UNIQUE_OBS_PATTERN, wrapped)
    assert ScrubbedKey()(wrapped, {}) == ExactKey()(base, {})
    assert ScrubbedKey(base=ExactKey(normalize_ws=False))(wrapped, {}) == base  # byte for byte
    assert not re.search(UNIQUE_OBS_PATTERN, "\n[request 0A1B2C3D at 2026-06-22T10:11:12Z]")  # lowercase hex only
    assert not re.search(UNIQUE_OBS_PATTERN, "\n[request 0a1b2c at 2026-06-22T10:11:12Z]")  # 8 hex digits


def test_scrubbed_key_undoes_the_real_unique_obs_wrapper_on_keydoor_rollouts() -> None:
    """Positive control [R]: the same seeds with and without UniqueObs(p=1) give identical G2PO advantages
    once the tags are scrubbed, while the unscrubbed key sees no repeat at all."""
    from agentmill.envs.keydoor import KeyDoorConfig, generate_layout, make_keydoor
    from agentmill.envs.rollout import RandomPolicy, collect_groups
    from agentmill.envs.wrappers import UniqueObsWrapper
    from agentmill.methods.g2po import g2po_advantages

    cfg = KeyDoorConfig(n_rooms=4, n_locks=1, max_steps=12)
    tasks = [generate_layout(s, cfg) for s in (1, 2)]
    plain, _, _ = collect_groups(lambda lay: make_keydoor(layout=lay, config=cfg), RandomPolicy(), tasks, 8, seed=3)
    tagged, _, _ = collect_groups(lambda lay: UniqueObsWrapper(make_keydoor(layout=lay, config=cfg), p=1.0),
                                  RandomPolicy(), tasks, 8, seed=3)
    assert plain.action.tolist() == tagged.action.tolist()  # the tag changes what is seen, not what happens
    fields = FieldsKey(("description", "inventory"))
    ref = g2po_advantages(plain, fields)
    scrubbed = g2po_advantages(tagged, ScrubbedKey(UNIQUE_OBS_PATTERN, fields))
    assert ref.diagnostics["merge_rate"] > 0.2
    assert scrubbed.advantages.tobytes() == ref.advantages.tobytes()
    with pytest.warns(UserWarning, match="merge_rate"):
        raw = g2po_advantages(tagged, fields)
    assert raw.diagnostics["merge_rate"] == 0.0


def test_scrubbed_key_scrubs_info_fields_for_a_fields_base() -> None:
    key = ScrubbedKey(UNIQUE_OBS_PATTERN, FieldsKey(("description", "inventory")))
    info = {"description": "hall\n[request deadbeef at 2026-01-01T00:00:00Z]", "inventory": "key"}
    assert key("anything", info) == ("hall", "key")
    assert ScrubbedKey([r"\d+"])("room 12 at 3", {}) == "room at"


def test_fields_key_merges_across_feedback_and_names_a_missing_field() -> None:
    key = FieldsKey(("description", "inventory"))
    a = key("You take the key.\n-= Hall =-", {"description": "-= Hall =-", "inventory": "a key", "feedback": "x"})
    b = key("Nothing happens.\n-= Hall =-", {"description": "-= Hall =-", "inventory": "a key", "feedback": "y"})
    assert a == b == ("-= Hall =-", "a key")
    assert FieldsKey(("inventory",))("", {"inventory": ["b", "a"]}) == (("b", "a"),)  # lists become hashable
    with pytest.raises(KeyError, match="no field 'inventory'"):
        key("obs", {"description": "d"})


def test_hash_key_is_sha1_of_the_base_text() -> None:
    assert HashKey()("a  b", {}) == hashlib.sha1(b"a b").hexdigest()
    assert HashKey(FieldsKey(("d",)))("", {"d": "x"}) == hashlib.sha1(repr(("x",)).encode()).hexdigest()


def test_cluster_similar_is_greedy_against_first_members() -> None:
    a = "a" * 40
    b = "a" * 39 + "b"  # ratio 0.975 with a
    c = "a" * 38 + "bb"  # ratio 0.95 with a, 0.975 with b
    assert cluster_similar([a, b, c], 0.96) == [0, 0, 1]  # c is compared with a (the representative), not b
    assert cluster_similar([b, a, c], 0.96) == [0, 0, 0]
    assert cluster_similar(["x", "y", "x"], 0.5) == [0, 1, 0]
    with pytest.raises(ValueError, match="threshold"):
        cluster_similar(["x"], 1.0)


def test_cluster_similar_warns_above_5000_rows() -> None:
    with pytest.warns(UserWarning, match="5001 rows"):
        cluster_similar(["same"] * 5001, 0.9)


def test_key_from_spec_parses_the_cli_forms_and_rejects_the_rest() -> None:
    from agentmill.methods.g2po.keys import key_from_spec
    assert key_from_spec("exact") == (ExactKey(), None)
    assert key_from_spec("fields:description, inventory") == (FieldsKey(("description", "inventory")), None)
    assert key_from_spec("similar:0.95") == (ExactKey(), 0.95)
    assert key_from_spec("hash")[0] == HashKey()
    scrub, _ = key_from_spec("scrub:unique")
    assert scrub("a\n[request 0a1b2c3d at 2026-06-22T10:11:12Z]", {}) == "a"
    assert key_from_spec(r"scrub:\d+")[0]("room 12", {}) == "room"
    for bad in ("exactly", "fields:", "similar:1.0", "similar:x", "scrub:(", "eval:__import__('os')"):
        with pytest.raises(ValueError):
            key_from_spec(bad)
