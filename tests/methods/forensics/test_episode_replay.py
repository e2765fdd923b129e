"""Episodes, exposure and replay: byte-identical without a change, one-variable with one, rewinds checked."""

from __future__ import annotations

import pytest

from agentmill.lm.replay import RecordReplayLM, ReplayMiss
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.forensics import Episode, LMAgent, PlantedAgent, check_replay, load_env, replay, run_episode
from agentmill.methods.forensics.agents import planted_responder
from agentmill.methods.forensics.variables import Intervention
from agentmill.methods.forensics.episode import OffPolicyRewindError
from agentmill.methods.forensics.variables import ConfoundedArmError


def test_exposure_and_identity(tmp_path) -> None:
    env = load_env("loyalty")
    agent = PlantedAgent(env, "self_consistency")
    ep = run_episode(env, env.values(), agent, seed=3, episode_id="e")
    assert ep.first_exposure("actor") == 2 and ep.first_exposure("honesty_instruction") == 0
    assert replay(ep, agent).tool_log() == ep.tool_log()
    assert replay(ep, agent, rewind="start").tool_log() == ep.tool_log()
    ep.save(tmp_path / "e.jsonl")
    assert Episode.load(tmp_path / "e.jsonl").tool_log() == ep.tool_log()


def test_a_change_keeps_the_prefix_and_touches_only_its_slot() -> None:
    env = load_env("loyalty")
    agent = PlantedAgent(env, "self_consistency")
    ep = run_episode(env, env.values(), agent, seed=0, episode_id="e")
    new = replay(ep, agent, change=Intervention("actor", "developer"))
    assert new.events[:2] == ep.events[:2]  # steps before the first exposure, byte for byte
    assert new.header["rewind"] == 2 and check_replay(ep, new) == "actor"
    # the coupled draw: the action can only move toward the lower planted rate
    flips = 0
    for i in range(200):
        e = run_episode(env, env.values(), agent, seed=0, episode_id=f"e{i}")
        r = replay(e, agent, change=Intervention("actor", "developer"))
        assert not (e.action == "report" and r.action == "conceal")
        flips += e.action != r.action
    assert 40 <= flips <= 120  # expected 200 · (0.47 − 0.07) = 80


def test_rewinds_after_first_exposure_raise() -> None:
    env = load_env("loyalty")
    agent = PlantedAgent(env, "self_consistency")
    ep = run_episode(env, env.values(), agent, seed=0, episode_id="e")
    for k in (3, 4):
        with pytest.raises(OffPolicyRewindError, match="first exposed at step 2"):
            replay(ep, agent, change=Intervention("actor", "developer"), rewind=k)
    replay(ep, agent, change=Intervention("actor", "developer"), rewind=1)
    with pytest.raises(ValueError, match="rewind must be"):
        replay(ep, agent, rewind="later")


def test_an_edited_replay_is_refused_with_its_line(tmp_path) -> None:
    env = load_env("loyalty")
    agent = PlantedAgent(env, "self_consistency")
    ep = run_episode(env, env.values(), agent, seed=0, episode_id="e")
    new = replay(ep, agent, change=Intervention("actor", "developer"))
    new.save(tmp_path / "r.jsonl")
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    lines[3] = lines[3].replace("hard questions", "some questions")
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfoundedArmError, match="event line 4"):
        check_replay(ep, Episode.load(tmp_path / "r.jsonl"))
    undeclared = replay(ep, agent, change=Intervention("actor", "developer"))
    undeclared.header["change"] = None
    with pytest.raises(ConfoundedArmError, match="declares None"):
        check_replay(ep, undeclared)


def test_cassette_replay_is_identical_and_a_miss_is_loud(tmp_path) -> None:
    env = load_env("tedium")
    lm = ScriptedLM(planted_responder(env), spec="scripted:planted")
    cas = tmp_path / "c.jsonl"
    ep = run_episode(env, env.values(), LMAgent(env, RecordReplayLM(lm, cas, "record")), seed=1, episode_id="x")
    play = RecordReplayLM(None, cas, "replay", spec=lm.spec)
    assert replay(ep, LMAgent(env, play), rewind="start").tool_log() == ep.tool_log()
    with pytest.raises(ReplayMiss):
        replay(ep, LMAgent(env, play), change=Intervention("n_errors", 5))


def test_planted_text_rule_reads_the_rendered_text() -> None:
    import numpy as np

    from agentmill.methods.forensics.agents import planted_rule

    rng = np.random.default_rng(0)
    policy = {"tedium": "tedium", "loyalty": "self_consistency", "secret_number": "infeasible", "sandbag": "confused",
              "whistle": "ethics", "oversight": "scheming"}
    for name, pol in policy.items():
        env = load_env(name)
        for _ in range(40):
            vals = {v.name: v.domain[int(rng.integers(len(v.domain)))] for v in env.variables}
            text = "\n\n".join(env.render(vals).docs[d] for d, _ in env.docs)
            assert planted_rule(name, text) == pytest.approx(env.prob(pol, vals)), (name, vals)
