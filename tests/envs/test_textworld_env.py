"""Real TextWorld: one small game generated offline by tw-make, then played (reward differences, `won`,
the `policy_commands` distance label), plus the cache, calibration and error paths of make_games."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from agentmill.envs.base import TextEnv, check_info, make
from agentmill.envs.rollout import RandomPolicy, collect_groups
from agentmill.envs.textworld_env import (GamePool, TextWorldEnv, _generate_one, clean_observation, make_games,
                                          random_success_rate)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """One game (world size 3, 6 objects, quest length 3, seed 1), generated into a fresh cache: ~3-7 s."""
    cache = tmp_path_factory.mktemp("cache")
    out = tmp_path_factory.mktemp("games")
    old = os.environ.get("AGENTMILL_CACHE")
    os.environ["AGENTMILL_CACHE"] = str(cache)
    try:
        games = make_games(out, 1, seed0=1, calibrate=None)
        yield games[0]
    finally:
        if old is None:
            os.environ.pop("AGENTMILL_CACHE", None)
        else:
            os.environ["AGENTMILL_CACHE"] = old


def test_generation_writes_the_game_its_metadata_and_a_cache_entry(game):
    assert game.name == "tw_1.z8" and game.is_file() and game.with_suffix(".json").is_file()
    entries = list((Path(os.environ["AGENTMILL_CACHE"]) / "textworld").iterdir())
    assert len(entries) == 1 and (entries[0] / "tw_1.z8").is_file()
    meta = json.loads((entries[0] / "args.json").read_text())
    assert meta["textworld"] == "1.7.0" and meta["args"][:2] == ["custom", "--world-size"]
    assert not [p for p in entries[0].parent.iterdir() if p.name.startswith(".tmp")]


def test_a_second_request_is_served_from_the_cache(game, tmp_path, monkeypatch):
    import agentmill.envs.textworld_env as twmod

    def no_tw_make():
        raise AssertionError("tw-make must not run on a cache hit")

    monkeypatch.setattr(twmod, "_tw_make", no_tw_make)
    again = make_games(tmp_path, 1, seed0=1, calibrate=None)
    assert again[0].read_bytes() == game.read_bytes()


def test_following_the_plan_wins_with_score_differences_and_falling_distance(game):
    env = TextWorldEnv(game, max_steps=40)
    assert isinstance(env, TextEnv)
    obs, info = env.reset(seed=0)
    check_info(info)
    assert "________" not in obs and obs.startswith(info["objective"])  # the banner is stripped
    assert info["task_id"] == "tw_1" and info["description"].startswith("-= ")
    d0 = info["oracle"]["distance_to_goal"]
    assert d0 >= 1 and info["oracle"]["plan_commands"]
    total, dists = 0.0, [d0]
    while True:
        cmd = info["oracle"]["plan_commands"][0]
        assert cmd in info["admissible_commands"]
        obs, r, term, trunc, info = env.step(cmd)
        check_info(info)
        assert not info["invalid_action"] and not trunc
        total += r
        dists.append(info["oracle"]["distance_to_goal"])
        if term:
            break
    assert info["won"] and not info["lost"] and info["admissible_commands"] == []
    assert total == info["max_score"] == info["score"] > 0  # rewards are score differences
    assert dists == list(range(d0, -1, -1))  # policy_commands shrinks by one per plan step; 0 when won
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    env.close()
    env.close()  # idempotent


def test_invalid_commands_repeated_observations_and_truncation(game):
    env = make("textworld-v0", game_file=str(game), max_steps=4)
    obs0, info0 = env.reset()
    obs, r, term, trunc, info = env.step("dance wildly")
    assert info["invalid_action"] and r == 0.0 and not term and not trunc
    assert info["admissible_commands"] == info0["admissible_commands"]
    o1 = env.step("look")[0]
    o2, _, _, trunc2, info = env.step("look")
    assert o1 == o2 and not trunc2  # the status line (moves) is stripped, so states repeat
    assert o1 == info["description"]
    *_, term, trunc, info = env.step("look")
    assert trunc and not term and info["step"] == 4
    env.close()


def test_collect_groups_on_a_game_pool(game):
    pool = GamePool(game.parent, max_steps=8)
    assert pool.tasks == [game]
    steps, labels, trajs = collect_groups(pool, RandomPolicy(), pool.tasks, group_size=2, seed=0)
    assert steps.n_trajectories == 2 and len(labels) == len(steps)
    assert all("oracle" not in d for d in steps.info)
    known = labels.dist_before >= 0
    assert known[0] and labels.dist_before[0] >= 1
    assert set(steps.group_id.tolist()) == {"tw_1@0/0"}


def test_missing_metadata_and_bad_parameters_are_refused(game, tmp_path):
    lone = tmp_path / "lone.z8"
    shutil.copyfile(game, lone)
    with pytest.raises(ValueError, match="json"):
        TextWorldEnv(lone)
    with pytest.raises(ValueError, match="json"):
        GamePool([lone])
    for kw in (dict(world_size=0), dict(world_size=21), dict(nb_objects=51), dict(quest_length=0)):
        with pytest.raises(ValueError, match="make_games"):
            make_games(tmp_path, 1, **kw)
    with pytest.raises(ValueError, match="custom"):
        make_games(tmp_path, 1, kind="tw-simple")


def test_missing_tw_make_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(FileNotFoundError, match=r"pip install textworld==1\.7\.0"):
        make_games(tmp_path / "out", 1, seed0=5, calibrate=None)


def test_tw_make_failure_reports_its_stderr(tmp_path):
    with pytest.raises(RuntimeError, match="unrecognized arguments"):
        _generate_one(["custom", "--no-such-flag"], 7, tmp_path, "1.7.0")
    assert list(tmp_path.iterdir()) == []  # the temporary directory is removed


def test_calibration_keeps_only_games_in_the_interval(game, tmp_path):
    rate = random_success_rate(game, episodes=4, max_steps=40)
    assert 0.0 <= rate <= 1.0
    # an interval that excludes the game's rate: nothing passes within one candidate
    lo, hi = (1.0, 1.0) if rate < 1.0 else (0.0, 0.0)
    with pytest.raises(RuntimeError, match="passed calibration"):
        make_games(tmp_path, 1, seed0=1, calibrate=(lo, hi), episodes=4, max_candidates=1)
    kept = make_games(tmp_path, 1, seed0=1, calibrate=(rate, rate), episodes=4)
    assert [p.name for p in kept] == ["tw_1.z8"]
    # the rate is cached next to the cached game
    cal = list((Path(os.environ["AGENTMILL_CACHE"]) / "textworld").glob("*/tw_1.calibration.json"))
    assert len(cal) == 1 and json.loads(cal[0].read_text()) == {"4x40": rate}


def test_clean_observation_strips_banner_prompt_and_status():
    raw = ("\n\n  ___ \n |   |\n \\$$/\n\nWelcome! Find the key.\n\n-= Hall =-\nA hall.\n\n\n\n>"
           "                         -= Hall =-0/3")
    assert clean_observation(raw) == "Welcome! Find the key.\n\n-= Hall =-\nA hall."
    assert clean_observation(raw, objective="Find the key.") == "Find the key.\n\n-= Hall =-\nA hall."
    assert clean_observation("\nYou take the key.\n\n>   -= Hall =-1/4") == "You take the key."


class _StubGame:
    """Stands in for textworld's gym env: scripted (obs, cumulative score, done, infos) replies."""

    def __init__(self, replies):
        self.replies = list(replies)

    def reset(self):
        return "\n-= Hall =-\nA hall.\n\n>  -= Hall =-0/0", _tw_info(["go north", "look"], ["go north"])

    def step(self, command):
        return self.replies.pop(0)

    def close(self):
        pass


def _tw_info(admissible, plan, won=False, lost=False, score=0):
    return {"admissible_commands": admissible, "policy_commands": plan, "won": won, "lost": lost, "score": score,
            "max_score": 1, "description": "-= Hall =-\nA hall.", "inventory": "You are carrying nothing.",
            "objective": "Go north.", "moves": 0}


def _stub_env(game, replies):
    env = TextWorldEnv(game, max_steps=10)
    env._env.close()
    env._env = _StubGame(replies)
    return env


def test_an_empty_admissible_list_truncates_with_stuck(game):
    env = _stub_env(game, [("\nNothing to do.\n>", 0, False, _tw_info([], []))])
    env.reset()
    obs, r, term, trunc, info = env.step("look")
    assert trunc and not term and info["stuck"] and obs == "Nothing to do."
    check_info(info)


def test_a_lost_game_or_missing_plan_gives_an_unknown_distance(game):
    env = _stub_env(game, [("\nNo plan.\n>", 0, False, _tw_info(["look"], [])),
                           ("\nYou fall.\n>", 0, True, _tw_info(["look"], ["look"], lost=True))])
    _, info = env.reset()
    assert info["oracle"]["distance_to_goal"] == 1
    _, _, term, _, info = env.step("look")
    assert not term and info["oracle"]["distance_to_goal"] is None and info["oracle"]["plan_commands"] == []
    _, _, term, trunc, info = env.step("jump")
    assert term and not trunc and info["lost"] and info["oracle"]["dead_end"]
    assert info["oracle"]["distance_to_goal"] is None and info["admissible_commands"] == []


def test_textworld_through_as_gymnasium_passes_check_env(game):
    import warnings

    from gymnasium.utils.env_checker import check_env

    from agentmill.envs.wrappers import as_gymnasium

    genv = as_gymnasium(TextWorldEnv(game, max_steps=40))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(genv, skip_render_check=True)
    genv.close()


def test_a_multi_line_action_is_one_command(game):
    env = TextWorldEnv(game, max_steps=10)
    _, info = env.reset()
    first = info["oracle"]["plan_commands"][0]
    _, _, _, _, info = env.step(f"look\n{first}")
    assert info["invalid_action"] and info["step"] == 1
    assert info["oracle"]["distance_to_goal"] == TextWorldEnv(game).reset()[1]["oracle"]["distance_to_goal"]
    env.close()


def test_tw_make_timeout_is_reported(tmp_path, monkeypatch):
    import agentmill.envs.textworld_env as twmod

    monkeypatch.setattr(twmod, "TW_MAKE_TIMEOUT_S", 0.05)
    with pytest.raises(RuntimeError, match="timed out after"):
        _generate_one(["custom", "--world-size", "3", "--nb-objects", "6", "--quest-length", "3", "--seed", "9"],
                      9, tmp_path, "1.7.0")
    assert list(tmp_path.iterdir()) == []


def test_game_command_is_one_printable_ascii_line_without_backslashes():
    from agentmill.envs.textworld_env import game_command

    assert game_command("  take\tthe \n key ") == "take the key"
    assert game_command("open\\a door\\") == "open a door"
    assert game_command("eat é\x00pie\x7f") == "eat pie"
    assert game_command("\\\\\n") == ""


def test_interpreter_escapes_neither_hang_nor_crash_the_process(game):
    """dumb-frotz reads ``\\a``, ``\\b``, ... as its own escapes: unfiltered, ``\\a`` hung the interpreter and random
    gymnasium actions segfaulted CI (2026-11-25). A subprocess, so a regression fails this test, not the run."""
    import subprocess

    script = ("import sys; from agentmill.envs.textworld_env import TextWorldEnv\n"
              "env = TextWorldEnv(sys.argv[1]); env.reset()\n"
              "for a in ['\\\\a', '\\\\b look', 'go \\\\d', '\\\\help', '\\\\']:\n"
              "    _, _, te, tr, info = env.step(a)\n"
              "    assert info['invalid_action'], a\n"
              "    if te or tr: env.reset()\n"
              "print('survived')\n")
    done = subprocess.run([sys.executable, "-c", script, str(game)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("survived"), done.stderr[-2000:]
