"""UniqueObsWrapper (no collisions at p = 1, scrubbing restores, oracle untouched), TimeLimit, as_gymnasium."""

from __future__ import annotations

import random
import re
import warnings

import pytest
from scipy import stats

from agentmill.envs.base import check_info, make
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv
from agentmill.envs.wrappers import (GYM_CHARSET, UNIQUE_OBS_PATTERN, TimeLimit, UniqueObsWrapper, as_gymnasium,
                                     ascii_normalise)


def _rollouts(env, n_episodes, seed0=0, actions_seed=0):
    """(obs, info) of every step of ``n_episodes`` random episodes, each reset with its own seed."""
    rng = random.Random(actions_seed)
    out = []
    for e in range(n_episodes):
        obs, info = env.reset(seed=seed0 + e)
        out.append((obs, info))
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(rng.choice(info["admissible_commands"]))
            out.append((obs, info))
            done = term or trunc
    return out


def test_unique_obs_at_p1_never_collides_and_scrubbing_restores_everything():
    base = KeyDoorEnv(layout_seed=2)
    wrapped = UniqueObsWrapper(KeyDoorEnv(layout_seed=2), p=1.0, seed=5)
    plain = _rollouts(base, 40)
    tagged = _rollouts(wrapped, 40)
    assert len(tagged) == len(plain) > 800
    # the plain world repeats observations heavily; the wrapped one never does
    assert len({o for o, _ in plain}) < len(plain) / 2
    assert len({o for o, _ in tagged}) == len(tagged)
    assert len({i["description"] for _, i in tagged}) == len(tagged)
    for (po, pi), (to, ti) in zip(plain, tagged):
        assert re.fullmatch(r".*" + UNIQUE_OBS_PATTERN, to, flags=re.S)
        assert re.sub(UNIQUE_OBS_PATTERN, "", to) == po
        assert re.sub(UNIQUE_OBS_PATTERN, "", ti["description"]) == pi["description"]
        assert ti["oracle"] == pi["oracle"] and ti["inventory"] == pi["inventory"]
        check_info(ti)


def test_unique_obs_is_seeded_and_keep_initial_leaves_o0():
    env = UniqueObsWrapper(KeyDoorEnv(layout_seed=1), seed=3)
    a = _rollouts(env, 3)
    b = _rollouts(env, 3)
    assert a == b
    c = _rollouts(UniqueObsWrapper(KeyDoorEnv(layout_seed=1), seed=4), 3)
    assert [o for o, _ in a] != [o for o, _ in c]
    keep = UniqueObsWrapper(KeyDoorEnv(layout_seed=1), keep_initial=True)
    o0 = {keep.reset(seed=s)[0] for s in range(5)}
    assert o0 == {KeyDoorEnv(layout_seed=1).reset(seed=0)[0]}
    assert re.search(UNIQUE_OBS_PATTERN, keep.step("look")[0])


def test_unique_obs_rate_p_is_respected():
    env = UniqueObsWrapper(KeyDoorEnv(layout_seed=0), p=0.3, seed=1)
    steps = _rollouts(env, 60)
    k = sum(bool(re.search(UNIQUE_OBS_PATTERN, o)) for o, _ in steps)
    assert stats.binomtest(k, len(steps), 0.3).pvalue > 1e-3
    assert all(not re.search(UNIQUE_OBS_PATTERN, o) for o, _ in _rollouts(UniqueObsWrapper(KeyDoorEnv(), p=0.0), 3))
    with pytest.raises(ValueError):
        UniqueObsWrapper(KeyDoorEnv(), p=1.5)


def test_registry_builds_the_unique_variant():
    env = make("keydoor-unique-v0", layout_seed=4, p=1.0, slip=0.1)
    assert isinstance(env, UniqueObsWrapper) and env.unwrapped.config.slip == 0.1
    obs, _ = env.reset(seed=0)
    assert re.search(UNIQUE_OBS_PATTERN, obs)
    assert env.layout.seed == 4  # attribute access falls through to the env


def test_time_limit_truncates_and_resets():
    env = TimeLimit(KeyDoorEnv(layout_seed=0, config=KeyDoorConfig(max_steps=100)), max_steps=2)
    env.reset(seed=0)
    assert env.step("wait")[2:4] == (False, False)
    assert env.step("wait")[2:4] == (False, True)
    env.reset(seed=0)
    assert env.step("wait")[2:4] == (False, False)
    # a terminating step is not also truncated
    env = TimeLimit(KeyDoorEnv(layout_seed=0), max_steps=4)
    env.reset(seed=0)
    for cmd in ["take orange key", "unlock east door with orange key", "go east"]:
        env.step(cmd)
    assert env.step("open chest")[2:4] == (True, False)
    with pytest.raises(ValueError):
        TimeLimit(KeyDoorEnv(), 0)


def test_ascii_normalise_maps_into_the_charset():
    s = ascii_normalise("Café\tbar ☃\r\nend", max_length=12)
    assert s == "Cafe bar  \ne" and all(c in GYM_CHARSET for c in s)


@pytest.mark.parametrize("unique", [False, True])
def test_as_gymnasium_passes_check_env(unique):
    from gymnasium.utils.env_checker import check_env

    inner = KeyDoorEnv(layout_seed=1, config=KeyDoorConfig(slip=0.2))
    genv = as_gymnasium(UniqueObsWrapper(inner) if unique else inner)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # check_env reports most problems as warnings
        check_env(genv, skip_render_check=True)
    obs, info = genv.reset(seed=3)
    assert genv.observation_space.contains(obs)
    obs, r, term, trunc, info = genv.step(info["admissible_commands"][0])
    assert genv.observation_space.contains(obs) and isinstance(r, float)
    obs, r, *_ = genv.step(genv.action_space.sample())
    assert r == pytest.approx(-0.1)  # a random string is an invalid command, not a crash
