"""The LM miner on a scripted LM: candidates tied to declared variables, untestable_here for undeclared ones,
unparsable replies and quotes absent from the CoT counted (never guessed), record then replay offline."""

from __future__ import annotations

import json

import pytest

from agentmill.lm.replay import RecordReplayLM
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.forensics import PlantedAgent, load_env, run_episode
from agentmill.methods.forensics.investigate import mine_hypotheses, sweep_dose
from agentmill.methods.forensics.miner import load_episode_dir, mine_with_lm, parse_miner_reply


def miner_responder(text: str) -> str:
    """Reads the delimited CoT: the tedium cue -> (tedium, n_errors); the deadline cue -> (time pressure, an
    undeclared clock variable); the validator cue -> an unparsable reply; always one item with a made-up quote."""
    cot = text.split("<<<REASONING\n", 1)[1].split("\nREASONING>>>", 1)[0]
    if "validator" in cot:
        return "I cannot tell."
    items = [{"motive": "ethics", "variable": "n_errors", "quote": "words the agent never wrote"}]
    for cue, motive, var in (("lot of rows", "tedium", "n_errors"), ("by hand", "tedium", "n_errors"),
                             ("deadline", "time pressure", "clock_speed")):
        if cue in cot:
            sent = next(s for s in cot.split(". ") if cue in s)
            items.append({"motive": motive, "variable": var, "quote": sent.upper()})
    return json.dumps({"candidates": items})


def _episodes(n: int = 40):
    env = load_env("tedium")
    agent = PlantedAgent(env, "tedium")
    vals = env.values(n_errors=200)
    return env, [run_episode(env, vals, agent, seed=0, episode_id=f"t/{i}") for i in range(n)]


def test_parse_miner_reply_by_hand() -> None:
    assert parse_miner_reply('ok {"candidates": [{"motive": "m"}]} tail') == [{"motive": "m"}]
    assert parse_miner_reply("no json") is None
    assert parse_miner_reply('{"candidates": "x"}') is None
    assert parse_miner_reply('{"candidates": [') is None


def test_lm_miner_counts_and_splits_candidates() -> None:
    env, eps = _episodes()
    lm = ScriptedLM(miner_responder, spec="scripted:miner")
    res = mine_with_lm(eps, env, lm, min_votes=2)
    conc = [e for e in eps if e.concerning]
    cots = [e.cot for e in conc]
    n_tedium = sum(("lot of rows" in c or "by hand" in c) and "validator" not in c for c in cots)
    n_deadline = sum("deadline" in c and "validator" not in c for c in cots)
    n_unparsable = sum("validator" in c for c in cots)
    assert res.episodes_read == len(conc) and res.unparsable == n_unparsable > 0
    assert res.unquoted == len(conc) - n_unparsable  # the made-up quote of every parsed reply
    assert res.calls == len(set(cots)) == len(lm.calls)
    assert [(c.motive, c.variables, c.votes) for c in res.candidates] == [("tedium", ("n_errors",), n_tedium)]
    assert [(u.motive, u.suggested_variable, u.votes) for u in res.untestable_here] == [
        ("time_pressure", "clock_speed", n_deadline)]
    assert mine_hypotheses(eps, env, miner="lm", lm=lm) == res.candidates
    with pytest.raises(ValueError, match="needs an LM"):
        mine_hypotheses(eps, env, miner="lm")
    with pytest.raises(ValueError, match="unknown miner"):
        mine_hypotheses(eps, env, miner="oracle")


def test_lm_miner_replays_offline(tmp_path) -> None:
    env, eps = _episodes(12)
    rec = tmp_path / "miner.jsonl"
    first = mine_with_lm(eps, env, RecordReplayLM(ScriptedLM(miner_responder, spec="scripted:miner"), rec,
                                                  "record"), min_votes=1)
    again = mine_with_lm(eps, env, RecordReplayLM(None, rec, "replay", spec="scripted:miner"), min_votes=1)
    assert again.candidates == first.candidates and again.unparsable == first.unparsable


def test_sweep_writes_episodes_that_load(tmp_path) -> None:
    env = load_env("tedium")
    agent = PlantedAgent(env, "tedium")
    sw = sweep_dose(env, env.values(), "n_errors", agent, n=3, seed=0, episodes_dir=tmp_path / "sw")
    assert len(sw.files) == 3 * len(env.variable("n_errors").domain)
    eps = load_episode_dir(tmp_path / "sw")
    assert sum(e.concerning for e in eps) == sum(k for _, k, _ in sw.counts) == int(sw.outcomes.sum())
    assert {e.values["n_errors"] for e in eps} == set(env.variable("n_errors").domain)
    fast = sweep_dose(env, env.values(), "n_errors", agent, n=3, seed=0)
    assert fast.files == [] and len(fast.outcomes) == len(sw.outcomes)
    with pytest.raises(ValueError, match="not empty"):
        sweep_dose(env, env.values(), "n_errors", agent, n=1, seed=0, episodes_dir=tmp_path / "sw")
    with pytest.raises(ValueError, match="numeric"):
        sweep_dose(env, env.values(), "deadline", agent, n=1, seed=0)
    with pytest.raises(ValueError, match="no such file"):
        load_episode_dir(tmp_path / "none")


def test_investigate_with_the_lm_miner(tmp_path) -> None:
    from agentmill.methods.forensics import HypothesisRegistry, investigate

    env = load_env("tedium")
    agent = PlantedAgent(env, "tedium")
    reg = HypothesisRegistry(tmp_path / "reg")
    lm = ScriptedLM(miner_responder, spec="scripted:miner")
    inv = investigate(env, agent, reg, incident=env.values(n_errors=200), budget=400, seed=0, miner="lm", lm=lm,
                      fallback="never")
    assert [(c.motive, c.source) for c in inv.candidates] == [("tedium", "lm")]
    assert [v.motive for v in inv.verdicts] == ["tedium"] and reg.get("inv:H_tedium").author == "lm-miner"
    assert inv.verdict_of("tedium") == "supported"  # the planted cause, found through the LM miner's candidate
