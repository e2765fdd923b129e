"""The TextEnv protocol helpers and the explicit-name registry (house rule 11)."""

from __future__ import annotations

import pytest

from agentmill.envs import base
from agentmill.envs.base import TextEnv, check_info, make, register, registered
from agentmill.envs.keydoor import KeyDoorEnv


def test_builtin_names_are_registered():
    assert {"keydoor-v0", "keydoor-unique-v0", "textworld-v0"} <= set(registered())


def test_make_builds_keydoor_with_config_overrides():
    env = make("keydoor-v0", layout_seed=3, slip=0.25, max_steps=7)
    assert isinstance(env, KeyDoorEnv) and isinstance(env, TextEnv)
    assert env.config.slip == 0.25 and env.config.max_steps == 7
    assert env.layout.seed == 3


def test_make_rejects_unknown_name_and_unknown_option():
    with pytest.raises(KeyError, match="unknown environment 'nope-v0'"):
        make("nope-v0")
    with pytest.raises(TypeError, match="unknown KeyDoor options"):
        make("keydoor-v0", n_room=3)


def test_duplicate_name_raises(monkeypatch):
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    with pytest.raises(ValueError, match="already registered"):
        register("keydoor-v0", KeyDoorEnv)
    register("mine-v0", lambda **kw: KeyDoorEnv(**kw))
    assert isinstance(make("mine-v0", layout_seed=1), KeyDoorEnv)
    with pytest.raises(ValueError, match="already registered"):
        register("mine-v0", lambda **kw: KeyDoorEnv(**kw))
    with pytest.raises(ValueError, match="module:attribute"):
        register("other-v0", "agentmill.envs.keydoor.make_keydoor")
    with pytest.raises(TypeError):
        register("other-v0", 3)  # type: ignore[arg-type]


def test_check_info_names_what_is_missing():
    env = make("keydoor-v0")
    _, info = env.reset(seed=0)
    check_info(info)
    bad = dict(info)
    del bad["won"]
    with pytest.raises(ValueError, match="won"):
        check_info(bad)
    bad = dict(info, admissible_commands=list(reversed(info["admissible_commands"])))
    with pytest.raises(ValueError, match="sorted"):
        check_info(bad)
    bad = dict(info, oracle={"state_id": "x"})
    with pytest.raises(ValueError, match="oracle"):
        check_info(bad)


def test_spec_prefix_reaches_its_factory_and_refuses_duplicates(monkeypatch):
    from agentmill.envs import base

    monkeypatch.setattr(base, "_PREFIXES", dict(base._PREFIXES))
    base.register_prefix("echo:", "agentmill.envs.keydoor:make_keydoor")
    with pytest.raises(ValueError):
        base.register_prefix("echo:", "agentmill.envs.keydoor:make_keydoor")
    with pytest.raises(ValueError):
        base.register_prefix("noco", "a:b")
    assert "wm:" in base._PREFIXES
