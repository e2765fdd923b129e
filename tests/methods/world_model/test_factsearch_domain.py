"""The FactSearch domain adapter and the steerable search world model's data (hand-checkable inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.factsearch import (MORE_RESULTS, SERVICE_ERROR, FactSearchConfig, FactSearchEnv, FactWorld,
                                       apply_control)
from agentmill.methods.world_model.domain_factsearch import (FactSearchDomain, action_json, card_entities, leaks,
                                                             parse_factsearch, snippets)
from agentmill.methods.world_model.format import extract_observation
from agentmill.methods.world_model.judges import JudgeItem, RuleScorer, field_f1

RESULTS = ("[1] https://wiki.example/Ka_Lo\nTitle: Ka Lo\nSnippet: Ka Lo was born in the year 1950.\nDate: N/A\n\n"
           "[2] https://wiki.example/news/3\nTitle: News: Ka Lo and Mi Ren\nSnippet: Reporters covered Ka Lo.\n"
           "Date: N/A\n\n" + MORE_RESULTS)


@pytest.fixture(scope="module")
def world() -> FactWorld:
    return FactWorld.generate(11, n_entities=24, n_news=4)


def test_parse_results_by_hand() -> None:
    p = parse_factsearch(RESULTS)
    assert p.fields["kind"] == "results" and p.fields["more"] and not p.extra
    assert [r[0] for r in p.fields["results"]] == [1, 2]
    assert ("r1", "snippet", "Ka Lo was born in the year 1950.") in p.facts
    assert ("search", "more", "yes") in p.facts and len(p.facts) == 7
    assert snippets(RESULTS) == ["Ka Lo was born in the year 1950.", "Reporters covered Ka Lo."]
    assert leaks(RESULTS, "1950") and not leaks(RESULTS, "195") and not leaks(RESULTS, "Dortel")
    assert FactSearchDomain().schema_checks(p) == [True, True, True]


def test_parse_error_page_and_garbage(world) -> None:
    assert parse_factsearch(SERVICE_ERROR).fields["kind"] == "error"
    page = next(iter(world.pages.values())).render()
    p = parse_factsearch(page)
    assert p.fields["kind"] == "page" and p.fields["url"].startswith("https://wiki.example/") and not p.extra
    assert parse_factsearch("hello there") is None and parse_factsearch("") is None


def test_real_observations_score_perfectly_and_corruption_lowers_f1(world) -> None:
    dom = FactSearchDomain()
    q = next(q for q in world.questions() if q.chain == ("founder",))
    env = FactSearchEnv(world, q)
    env.reset(seed=0)
    card = dom.card((world, q))
    for a in world.oracle_plan(q)[:-1]:
        obs = env.step(a)[0]
        assert field_f1(dom, obs, obs) == 1.0
        dims = RuleScorer(dom).score_observation(obs, JudgeItem(obs, obs, (), card))
        assert dims.format == 5 and dims.factuality == 5
    bad = RESULTS.replace("1950", "1951")
    assert 0 < field_f1(dom, bad, RESULTS) < 1


def test_card_has_question_answer_and_entities(world) -> None:
    dom = FactSearchDomain()
    q = next(q for q in world.questions() if q.hops == 2)
    names = card_entities(world, q)
    assert names[:2] == list(q.entities) and len(set(names)) == len(names) and len(names) <= 2 + 2 + 4
    card = dom.card((world, q))
    assert card.splitlines()[:2] == [f"Question: {q.text}", f"Answer: {q.answer}"]
    assert all(n in card for n in names)


def test_action_json_uses_qwen_tool_names() -> None:
    assert action_json("web_search: a b") == {"name": "web_search", "arguments": {"query": "a b"}}
    assert action_json("web_extractor: https://wiki.example/X") == {"name": "web_extractor",
                                                                     "arguments": {"url": "https://wiki.example/X"}}
    assert action_json("dance")["name"] == "command"


def test_examples_carry_controls_with_programmatic_targets(world) -> None:
    from agentmill.methods.world_model.search_wm import (SearchWMConfig, collect, control_text, examples,
                                                         target_observation)

    cfg = SearchWMConfig(n_entities=24, n_news=4)
    trs = collect([11], cfg)
    assert trs and all(t.action.startswith(("web_search:", "web_extractor:")) for t in trs)
    exs = examples(trs, cfg)
    searches = [i for i, t in enumerate(trs) if t.action.startswith("web_search:")]
    ctl = [i for i in searches if "**Simulation Instruction:**" in exs[i].prompt]
    share = len(ctl) / len(searches)
    assert abs(share - 0.3) < 4 * np.sqrt(0.21 / len(searches))
    assert not any("**Simulation Instruction:**" in exs[i].prompt for i in range(len(trs)) if i not in searches)
    for i in ctl:
        obs = extract_observation(exs[i].target).observation
        if "InjectError" in exs[i].prompt:
            assert obs == SERVICE_ERROR
        elif "Stingy" in exs[i].prompt:
            assert not leaks(obs, trs[i].answer)
            assert obs == apply_control(trs[i].results, world, _q(world, trs[i].qid), stingy=True,
                                        page_size=3).strip()
    assert target_observation(trs[searches[0]], None, cfg) == trs[searches[0]].next_obs
    assert control_text("paginate2") == "Paginate(k=2)"
    with pytest.raises(ValueError):
        control_text("loud")
    plain = examples(trs, cfg, controls=False)
    assert not any("**Simulation Instruction:**" in e.prompt for e in plain)


def _q(world, qid):
    return next(q for q in world.questions() if q.qid == qid)


def test_real_env_transitions_match_the_collected_ones(world) -> None:
    from agentmill.methods.world_model.search_wm import SearchWMConfig, collect

    trs = collect([11], SearchWMConfig(n_entities=24, n_news=4))
    tr = next(t for t in trs if t.action.startswith("web_search:"))
    env = FactSearchEnv(world, _q(world, tr.qid), FactSearchConfig(n_entities=24, n_news=4))
    env.reset(seed=0)
    assert env.step(tr.action)[0] == tr.next_obs


class _OracleWM:
    """A scripted world model: the real tool output for the action in the prompt (stingy when instructed)."""

    def __init__(self, world, question, garbage: bool = False) -> None:
        self.world, self.question, self.garbage, self.calls = world, question, garbage, 0

    def predict_batch(self, prompts):
        import json
        import re
        from types import SimpleNamespace

        out = []
        for p in prompts:
            self.calls += 1
            act = json.loads(re.search(r"```json\n(.*?)\n```", p, re.S).group(1))
            if self.garbage:
                out.append(SimpleNamespace(observation="lorem ipsum"))
                continue
            if "InjectError" in p:
                out.append(SimpleNamespace(observation=SERVICE_ERROR))
                continue
            env = FactSearchEnv(self.world, self.question, FactSearchConfig(
                n_entities=24, n_news=4, stingy="Stingy(" in p, page_size=3 if "Stingy(" in p else 5))
            env.reset(seed=0)
            name = act["name"]
            arg = act["arguments"].get("query") or act["arguments"].get("url")
            out.append(SimpleNamespace(observation=env.tool_output(f"{name}: {arg}")[0].strip()))
        return out


def test_oracle_simulator_replays_the_real_env(world) -> None:
    from agentmill.envs.base import check_info
    from agentmill.methods.world_model.search_wm import SearchSimEnv

    q = next(q for q in world.questions() if q.hops == 2)
    sim = SearchSimEnv(_OracleWM(world, q), world, q)
    real = FactSearchEnv(world, q, FactSearchConfig(n_entities=24, n_news=4))
    (o1, i1), (o2, i2) = sim.reset(seed=0), real.reset(seed=0)
    assert o1 == o2 and i1["admissible_commands"] == i2["admissible_commands"]
    for a in world.oracle_plan(q):
        s, r = sim.step(a), real.step(a)
        check_info(s[4])
        assert s[0].strip() == r[0].strip() and s[1:4] == r[1:4]
        assert s[4]["admissible_commands"] == r[4]["admissible_commands"]
    assert s[1] == 1.0


def test_simulator_controls_failures_and_the_card_stays_hidden(world) -> None:
    from agentmill.methods.world_model.search_wm import SearchSimEnv

    q = next(q for q in world.questions() if q.chain == ("birth_year",))
    st = SearchSimEnv(_OracleWM(world, q), world, q, control="stingy")
    obs, info = st.reset(seed=0)
    assert q.answer not in obs and all(q.answer not in c for c in info["admissible_commands"])
    o, *_ = st.step(f"web_search: {q.entities[0]} birth year")
    assert not leaks(o, q.answer)
    bad = SearchSimEnv(_OracleWM(world, q, garbage=True), world, q)
    bad.reset(seed=0)
    o, r, term, trunc, info = bad.step("web_search: anything")
    assert o == SERVICE_ERROR and info["sim_parse_failure"] and bad.parse_failures == 1
    errs = 0
    for s in range(300):
        e = SearchSimEnv(_OracleWM(world, q), world, q, error_rate=0.2)
        e.reset(seed=s)
        errs += e.step(f"web_search: {q.entities[0]}")[0] == SERVICE_ERROR
    assert abs(errs / 300 - 0.2) < 4 * np.sqrt(0.16 / 300)
    wrong = SearchSimEnv(_OracleWM(world, q), world, q)
    wrong.reset(seed=0)
    assert wrong.step("answer: 1")[1:3] == (0.0, True)
