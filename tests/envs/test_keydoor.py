"""KeyDoor: protocol conformance, determinism, dynamics, oracle and the exact tabular model [R]."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

from agentmill.core.tabular_mdp import TabularMDP, bfs_distance
from agentmill.core.types import DEAD_END_DISTANCE
from agentmill.envs.base import TextEnv, check_info
from agentmill.envs.keydoor import (INVALID_FEEDBACK, KeyDoorConfig, KeyDoorEnv, generate_layout, layouts,
                                    random_success_rate)

SMALL = KeyDoorConfig(n_rooms=4, n_locks=1, n_distractors=1, trap=True)
"""A world small enough for a dense exact model (tens of states)."""


def _play(env: KeyDoorEnv, actions, seed=0):
    out = [env.reset(seed=seed)]
    for a in actions:
        out.append(env.step(a))
    return out


def _oracle_plan(env: KeyDoorEnv) -> list[str]:
    """Greedy descent of the oracle distance from the start (slip 0): the shortest winning command list."""
    obs, info = env.reset(seed=0)
    plan = []
    while not info["won"]:
        d = info["oracle"]["distance_to_goal"]
        for cmd in info["admissible_commands"]:
            probe = KeyDoorEnv(env.layout, env.config)
            probe.reset(seed=0)
            for c in plan:
                probe.step(c)
            _, _, _, _, nxt = probe.step(cmd)
            if nxt["oracle"]["distance_to_goal"] == d - 1:
                break
        else:
            raise AssertionError(f"no command lowers the distance {d}")
        plan.append(cmd)
        _, _, _, _, info = env.step(cmd)
    return plan


# ---- configuration ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(n_rooms=1), dict(n_locks=6, n_rooms=6), dict(slip=1.0), dict(slip=-0.1),
                                dict(max_steps=0), dict(n_distractors=11), dict(invalid_penalty=-1.0),
                                dict(n_rooms=2.5)])
def test_config_rejects_out_of_range_values(kw):
    with pytest.raises(ValueError):
        KeyDoorConfig(**kw)


# ---- protocol and determinism ----------------------------------------------------------------------------------


def test_hand_checked_walkthrough_of_layout_0():
    env = KeyDoorEnv(layout_seed=0)
    obs, info = env.reset(seed=0)
    assert obs == ("Your task: open the chest in the attic.\n-= Workshop =-\nYou see an orange key.\n"
                   "Exits: east (a locked orange door), north.\nYou are carrying nothing.")
    assert info["admissible_commands"] == ["examine orange key", "go north", "inventory", "look",
                                           "take orange key", "wait"]
    assert info["oracle"]["distance_to_goal"] == 4 and info["step"] == 0
    assert info["oracle"]["plan_commands"] == ["take orange key"]
    plan = ["take orange key", "unlock east door with orange key", "go east", "open chest"]
    dists, rewards = [], []
    for k, cmd in enumerate(plan):
        obs, r, term, trunc, info = env.step(cmd)
        check_info(info)
        dists.append(info["oracle"]["distance_to_goal"])
        assert info["oracle"]["plan_commands"] == plan[k + 1:k + 2]
        rewards.append(r)
        assert term == (k == 3) and not trunc and info["step"] == k + 1
    assert dists == [3, 2, 1, 0] and rewards == [0.0, 0.0, 0.0, 1.0]
    assert info["won"] and not info["lost"] and info["admissible_commands"] == []
    assert obs.startswith("You open the chest. *** You won! ***\n-= Attic =-")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")


def test_protocol_conformance_and_determinism_by_seed():
    cfg = KeyDoorConfig(slip=0.3)
    env = KeyDoorEnv(layout_seed=5, config=cfg)
    assert isinstance(env, TextEnv)

    def episode(seed):
        rng = random.Random(99)
        obs, info = env.reset(seed=seed)
        check_info(info)
        trace = [(obs, info)]
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(rng.choice(info["admissible_commands"] + ["dance"]))
            check_info(info)
            assert isinstance(r, float) and isinstance(term, bool) and isinstance(trunc, bool)
            trace.append((obs, r, term, trunc, info))
            done = term or trunc
        return trace

    a, b = episode(7), episode(7)
    assert a == b
    # the seed drives the slips: some pair of seeds must give different traces under the same commands
    assert any(episode(s) != a for s in range(8, 20))
    assert generate_layout(5, cfg) == env.layout and generate_layout(6, cfg) != env.layout


def test_invalid_string_is_penalised_and_changes_nothing():
    env = KeyDoorEnv(layout_seed=0, config=KeyDoorConfig(step_penalty=0.01))
    _, info0 = env.reset(seed=0)
    s0 = env.state
    obs, r, term, trunc, info = env.step("  Dance   wildly ")
    assert env.state == s0 and not term and not trunc
    assert r == pytest.approx(-0.11)
    assert info["invalid_action"] and info["feedback"] == INVALID_FEEDBACK
    assert obs.startswith(INVALID_FEEDBACK + "\n")
    assert info["description"] == info0["description"] and info["inventory"] == info0["inventory"]
    # admissible strings are matched case- and whitespace-insensitively
    _, r, _, _, info = env.step("TAKE   orange key")
    assert not info["invalid_action"] and r == pytest.approx(-0.01) and "orange key" in info["inventory"]


def test_feedback_is_outside_description_so_fields_merge_and_exact_obs_does_not():
    env = KeyDoorEnv(layout_seed=0)
    env.reset(seed=0)
    o1, _, _, _, i1 = env.step("look")
    o2, _, _, _, i2 = env.step("wait")
    assert o1 != o2
    assert (i1["description"], i1["inventory"]) == (i2["description"], i2["inventory"])
    assert i1["oracle"]["state_id"] == i2["oracle"]["state_id"]
    plain = KeyDoorEnv(layout_seed=0, config=KeyDoorConfig(include_feedback=False))
    plain.reset(seed=0)
    p1 = plain.step("look")[0]
    p2 = plain.step("wait")[0]
    assert p1 == p2 == f"{i1['description']}\n{i1['inventory']}"


def test_truncation_at_max_steps():
    env = KeyDoorEnv(layout_seed=0, config=KeyDoorConfig(max_steps=3))
    env.reset(seed=0)
    flags = [env.step("wait")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


def test_trap_makes_a_dead_end_while_the_episode_continues():
    # layout 0: workshop (orange key) -north-> office (red key) -west, red door-> scullery (the well); the orange
    # key opens the door to the attic, where the chest is
    env = KeyDoorEnv(layout_seed=0)
    lay = env.layout
    assert lay.rooms[lay.well_room] == "scullery"
    _, info = env.reset(seed=0)
    for cmd in ["take orange key", "go north", "take red key", "unlock west door with red key", "go west"]:
        _, _, _, _, info = env.step(cmd)
        assert not info["invalid_action"], cmd
    assert info["inventory"] == "You are carrying an orange key. Keys left in their locks: red."
    assert "throw orange key into the well" in info["admissible_commands"]
    assert info["oracle"]["distance_to_goal"] == 5 and not info["oracle"]["dead_end"]
    _, r, term, trunc, info = env.step("throw orange key into the well")
    assert info["oracle"]["dead_end"] and info["oracle"]["distance_to_goal"] == DEAD_END_DISTANCE
    assert not term and not trunc and r == 0.0 and not info["lost"]
    assert info["inventory"] == "You are carrying nothing. Keys left in their locks: red."


def test_every_generated_layout_is_solvable_in_its_oracle_distance():
    for seed in range(12):
        for cfg in (KeyDoorConfig(), SMALL, KeyDoorConfig(n_rooms=8, n_locks=3, n_distractors=0)):
            env = KeyDoorEnv(layout_seed=seed, config=cfg)
            _, info = env.reset(seed=0)
            d0 = info["oracle"]["distance_to_goal"]
            assert 1 <= d0 < DEAD_END_DISTANCE
            if cfg.n_locks:  # the chest needs at least one key: take + unlock + go + open
                assert d0 >= 4
            plan = _oracle_plan(env)
            assert len(plan) == d0


def test_slip_frequency_matches_config():
    # from the start of layout 0 "go north" is the only open exit... use a room with several exits instead
    env = KeyDoorEnv(layout_seed=0, config=KeyDoorConfig(slip=0.3))
    n, slips = 600, 0
    for e in range(n):
        env.reset(seed=e)
        env.step("go north")  # into the office, which has exits north, south, west
        _, _, _, _, info = env.step("go north")
        slips += info["feedback"].startswith("You slip")
    # two-sided binomial test at the configured rate
    assert stats.binomtest(slips, n, 0.3).pvalue > 1e-3


# ---- calibrated layouts ------------------------------------------------------------------------------------------


def test_layouts_are_calibrated_and_deterministic():
    lays = layouts(3, seed=0, calibrate=(0.05, 0.5), episodes=32)
    assert len(lays) == 3 and lays == layouts(3, seed=0, calibrate=(0.05, 0.5), episodes=32)
    for lay in lays:
        assert 0.05 <= random_success_rate(lay, KeyDoorConfig(), 32, seed=lay.seed) <= 0.5
    assert len({lay.task_id for lay in lays}) == 3
    with pytest.raises(RuntimeError, match="only 0 of 1"):
        layouts(1, seed=0, calibrate=(1.0, 1.0), episodes=4, max_candidates=3)


# ---- exact model -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_to_tabular_agrees_with_the_env_on_random_walks(seed):
    env = KeyDoorEnv(layout_seed=seed, config=SMALL)
    mdp, index, obs_of, adm_of = env.to_tabular(gamma=0.9)
    assert isinstance(mdp, TabularMDP) and mdp.gamma == 0.9
    states = env.reachable_states()
    assert mdp.start[0] == 1.0 and mdp.absorbing.tolist() == [s[3] for s in states]
    actions = env.tabular_actions
    rng = random.Random(seed)
    checked = 0
    for ep in range(40):
        obs, info = env.reset(seed=ep)
        while True:
            s = index[info["oracle"]["state_id"]]
            assert obs.endswith(obs_of[s]) and tuple(info["admissible_commands"]) == adm_of[s]
            assert [actions[a] for a in np.flatnonzero(mdp.valid[s])] == list(adm_of[s])
            cmd = rng.choice(info["admissible_commands"])
            a = actions.index(cmd)
            obs, r, term, trunc, info = env.step(cmd)
            s2 = index[info["oracle"]["state_id"]]
            assert mdp.P[s, a, s2] == 1.0 and mdp.R[s, a] == r
            assert mdp.absorbing[s2] == term
            checked += 1
            if term or trunc:
                break
    assert checked > 300


def test_to_tabular_oracle_distance_equals_bfs_on_the_model():
    env = KeyDoorEnv(layout_seed=4, config=SMALL)
    mdp, index, _, _ = env.to_tabular()
    nxt = np.where(mdp.valid, mdp.P.argmax(2), -1)
    dist = bfs_distance(nxt, mdp.absorbing)
    for state in env.reachable_states():
        assert dist[index[env.state_id(state)]] == env.distance(state)
    assert (dist >= DEAD_END_DISTANCE).any()  # the trap creates dead ends


def test_to_tabular_slip_probabilities_match_sampled_frequencies():
    cfg = KeyDoorConfig(n_rooms=5, n_locks=1, n_distractors=0, trap=False, slip=0.4)
    env = KeyDoorEnv(layout_seed=3, config=cfg)  # its start room has two open exits, east and south
    mdp, index, _, _ = env.to_tabular()
    a = env.tabular_actions.index("go east")
    support = np.flatnonzero(mdp.P[0, a])
    assert sorted(mdp.P[0, a, support].tolist()) == [pytest.approx(0.4), pytest.approx(0.6)]
    counts = np.zeros(len(support))
    n = 2000
    for e in range(n):
        env.reset(seed=e)
        _, _, _, _, info = env.step("go east")
        counts[list(support).index(index[info["oracle"]["state_id"]])] += 1
    assert stats.chisquare(counts, n * mdp.P[0, a, support]).pvalue > 1e-3


def test_to_tabular_refuses_a_model_too_big_for_dense_P():
    with pytest.raises(ValueError, match="smaller config"):
        KeyDoorEnv(layout_seed=3).to_tabular()


def test_fully_observable_setting_key_is_a_bijection_with_state():
    """G-1's setting (trap off, droppable off): (description, inventory) identifies the true state."""
    cfg = KeyDoorConfig(trap=False, droppable=False)
    for seed in range(4):
        env = KeyDoorEnv(layout_seed=seed, config=cfg)
        states = env.reachable_states()
        keys = {env.texts(s) for s in states}
        assert len(keys) == len(states)


def test_a_layout_must_match_the_config():
    lay = generate_layout(0, KeyDoorConfig())
    for cfg in (KeyDoorConfig(n_rooms=5), KeyDoorConfig(n_locks=1), KeyDoorConfig(n_distractors=1),
                KeyDoorConfig(trap=False)):
        with pytest.raises(ValueError, match="does not match"):
            KeyDoorEnv(lay, cfg)
    # dynamics-only fields may differ from the generating config
    assert KeyDoorEnv(lay, KeyDoorConfig(slip=0.2, max_steps=5)).layout == lay


# ---- shared per-world caches -------------------------------------------------------------------------------------


def _random_play(env: KeyDoorEnv, seed: int, episodes: int = 6) -> list:
    rng = random.Random(seed)
    out = []
    for e in range(episodes):
        obs, info = env.reset(seed=seed + e)
        out.append((obs, info))
        done = False
        while not done:
            cmds = info["admissible_commands"] + ["dance"]  # and an invalid string now and then
            obs, reward, term, trunc, info = env.step(rng.choice(cmds))
            out.append((obs, reward, term, trunc, info))
            done = term or trunc
    return out


@pytest.mark.parametrize("cfg", [KeyDoorConfig(), KeyDoorConfig(slip=0.3, droppable=False), SMALL])
def test_envs_of_one_world_share_caches_without_changing_any_observation(cfg):
    """Every env of a (layout, config) shares the per-state tables; a cold-cache env plays the same episodes."""
    from agentmill.envs import keydoor

    lay = generate_layout(3, cfg)
    keydoor._shared_tables.cache_clear()
    cold = _random_play(KeyDoorEnv(lay, cfg), seed=11)
    warm = _random_play(KeyDoorEnv(lay, cfg), seed=11)  # every table already filled by the first env
    assert cold == warm
    assert KeyDoorEnv(lay, cfg)._seen is KeyDoorEnv(lay, cfg)._seen
    assert KeyDoorEnv(lay, cfg)._seen is not KeyDoorEnv(generate_layout(4, cfg), cfg)._seen


def test_random_success_rate_equals_playing_env_step():
    """The calibration skips building observations; it must still be the rate of the episodes env.step plays."""
    for seed in (0, 5):
        lay = generate_layout(seed, KeyDoorConfig(slip=0.2))
        env = KeyDoorEnv(lay, KeyDoorConfig(slip=0.2))
        rng = random.Random(seed)
        wins = 0
        for e in range(24):
            _, info = env.reset(seed=seed * 1_000_003 + e)
            done = False
            while not done:
                _, _, term, trunc, info = env.step(rng.choice(env.admissible_commands(env.state)))
                done = term or trunc
            wins += info["won"]
        assert random_success_rate(lay, KeyDoorConfig(slip=0.2), 24, seed=seed) == wins / 24
