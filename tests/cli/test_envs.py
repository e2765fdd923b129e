"""``agentmill envs``: TextWorld generation, rollout collection, bad input."""

from __future__ import annotations

import json
import sys

import pytest

from agentmill.cli.main import main
from agentmill.core.types import StepTable
from agentmill.envs.base import make
from agentmill.envs.keydoor import layouts
from agentmill.envs.rollout import RandomPolicy, collect_groups


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_rollout_writes_the_same_groups_as_collect_groups(tmp_path):
    out = tmp_path / "sub" / "r.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--groups", "3", "--n", "4", "--seed", "5",
                 "--out", str(out)]) == 0
    recs = _lines(out)
    assert len(recs) == 12 and {r["schema"] for r in recs} == {"agentmill.rollout/1"}
    assert recs[0]["meta"]["policy"] == "random" and recs[0]["env"] == "keydoor-v0"
    assert all("label" in s for r in recs for s in r["steps"])  # oracle labels kept beside the steps ...
    assert not any("oracle" in s["info"] for r in recs for s in r["steps"])  # ... never inside info
    assert not (tmp_path / "sub" / "r.jsonl.partial").exists()
    # the CLI is a face: the same call through the library gives the same table, row for row
    ref, _, _ = collect_groups(lambda lay: make("keydoor-v0", layout=lay), RandomPolicy(), layouts(3, 5),
                               group_size=4, seed=5)
    got, labels = StepTable.from_jsonl(str(out))
    assert got.equals(ref) and labels is not None and len(labels) == len(ref)


def test_rollout_prints_a_json_summary(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-unique-v0", "--groups", "2", "--n", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    summary = json.loads(text[text.index("{\n"):])
    assert summary["groups"] == 2 and summary["trajectories"] == 6 and summary["steps"] == len(
        StepTable.from_jsonl(str(out))[0])
    assert "[request " in _lines(out)[0]["steps"][0]["obs"]  # the UniqueObs wrapper is on


def test_rollout_with_a_table_policy_follows_its_logits(tmp_path):
    """A table policy with a huge logit on one command at the start state picks it (almost) always."""
    lay = layouts(1, 0)[0]
    env = make("keydoor-v0", layout=lay)
    _, info = env.reset(seed=0)
    first = info["admissible_commands"][-1]
    pol = tmp_path / "pol.json"
    pol.write_text(json.dumps({"schema": "agentmill.table_policy/1", "rows": [
        {"task_id": info["task_id"], "key": [info["description"], info["inventory"]], "logits": {first: 50.0}}]}))
    out = tmp_path / "r.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--groups", "1", "--n", "6", "--policy", f"table:{pol}",
                 "--out", str(out)]) == 0
    assert [r["steps"][0]["action"] for r in _lines(out)] == [first] * 6
    out2 = tmp_path / "r2.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--groups", "1", "--n", "6", "--out", str(out2)]) == 0
    assert len({r["steps"][0]["action"] for r in _lines(out2)}) > 1  # the random policy does not


@pytest.mark.parametrize("argv,needle", [
    (["--env", "keydoor-v9"], "--env must be one of"),
    (["--env", "keydoor-v0", "--n", "0"], "--n must be >= 1"),
    (["--env", "keydoor-v0", "--groups", "-1"], "--groups must be >= 1"),
    (["--env", "keydoor-v0", "--policy", "greedy"], "--policy must be random, table:PATH or lm:SPEC"),
    (["--env", "keydoor-v0", "--policy", "table:/nonexistent/p.json"], "no such file"),
    (["--env", "keydoor-v0", "--groups", "1", "--max-steps", "1"], "--no-calibrate"),
    (["--env", "textworld:/nonexistent/games"], "no such directory"),
])
def test_rollout_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    out = tmp_path / "r.jsonl"
    assert main(["envs", "rollout", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_bad_table_policy_file_is_one_line(tmp_path, capsys):
    pol = tmp_path / "pol.json"
    for doc in ("not json", json.dumps({"schema": "other"}),
                json.dumps({"schema": "agentmill.table_policy/1", "rows": [{"key": "x", "logits": {}}]}),
                json.dumps({"schema": "agentmill.table_policy/1", "rows": [{"task_id": "t", "key": "x",
                                                                            "logits": {"go": "high"}}]})):
        pol.write_text(doc)
        assert main(["envs", "rollout", "--env", "keydoor-v0", "--policy", f"table:{pol}",
                     "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("agentmill: error:") == 4 and "missing field 'task_id'" in err
    assert not (tmp_path / "r.jsonl").exists()


def test_lm_policy_without_candidate_policy_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "agentmill.lm.policy", None)  # an lm layer without CandidatePolicy
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--policy", "lm:hf:smollm2",
                 "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "CandidatePolicy" in err and "not available yet" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_lm_policy_rollouts_equal_the_library(tmp_path):
    """lm:SPEC is lm.policy.CandidatePolicy over the white-box model: same actions as calling it directly."""
    from agentmill.envs.keydoor import KeyDoorConfig
    from agentmill.lm import load_lm
    from agentmill.lm.policy import CandidatePolicy

    spec = "tiny:new?max_len=1024"
    out = tmp_path / "r.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--policy", f"lm:{spec}", "--groups", "1", "--n", "2",
                 "--max-steps", "3", "--no-calibrate", "--seed", "3", "--out", str(out)]) == 0
    cfg = KeyDoorConfig(max_steps=3)
    ref, _, _ = collect_groups(lambda lay: make("keydoor-v0", layout=lay, config=cfg), CandidatePolicy(load_lm(spec)),
                               layouts(1, 3, calibrate=None, config=cfg), group_size=2, seed=3)
    got, _ = StepTable.from_jsonl(str(out))
    assert got.equals(ref) and all(a in c for a, c in zip(got.action, got.candidates))
    assert _lines(out)[0]["meta"]["policy"] == f"lm:{spec}"


def test_lm_policy_needs_a_white_box(tmp_path, capsys):
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--policy", "lm:scripted:echo",
                 "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "needs a WhiteBoxLM" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv,needle", [
    (["--n", "0"], "--n must be >= 1"),
    (["--n", "1", "--world-size", "0"], "world_size"),
    (["--n", "1", "--quest-length", "21"], "quest_length"),
    (["--n", "1", "--calibrate-lo", "0.7", "--calibrate-hi", "0.2"], "lo <= hi"),
])
def test_textworld_games_bad_input(tmp_path, capsys, argv, needle):
    out = tmp_path / "games"
    assert main(["envs", "textworld-games", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.slow
def test_textworld_games_then_rollouts_offline(tmp_path, capsys, monkeypatch):
    """One game generated by tw-make (~5 s), then two groups of rollouts on it."""
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    games = tmp_path / "games"
    assert main(["envs", "textworld-games", "--n", "1", "--seed", "1", "--no-calibrate", "--out", str(games)]) == 0
    text = capsys.readouterr().out
    assert json.loads(text[text.index("{\n"):])["games"] == [str(games / "tw_1.z8")]
    out = tmp_path / "tw.jsonl"
    assert main(["envs", "rollout", "--env", f"textworld:{games}", "--groups", "2", "--n", "2", "--max-steps", "5",
                 "--out", str(out)]) == 0
    recs = _lines(out)
    assert len(recs) == 4 and all(len(r["steps"]) <= 5 for r in recs)
    assert len({r["group_id"] for r in recs}) == 2  # the game is listed twice: two groups, different seeds
    assert recs[0]["steps"][0]["info"]["admissible_commands"]
