"""FactSearch: determinism, oracle answerability, controls, bad input, BM25 layout [R]."""

from __future__ import annotations

import re

import numpy as np
import pytest

from agentmill.envs.base import TextEnv, check_info
from agentmill.envs.factsearch import (MORE_RESULTS, SERVICE_ERROR, FactSearchConfig, FactSearchEnv, FactWorld,
                                       apply_control, make_factsearch, make_factsearch_stingy, normalise)
from agentmill.methods.world_model.judges import praise_count


@pytest.fixture(scope="module")
def world() -> FactWorld:
    return FactWorld.generate(3, n_entities=24, n_news=4)


def test_generation_is_deterministic_and_seed_dependent():
    a, b, c = FactWorld.generate(5, 24), FactWorld.generate(5, 24), FactWorld.generate(6, 24)
    assert [p.render() for p in a.pages.values()] == [p.render() for p in b.pages.values()]
    assert [q for q in a.questions()] == [q for q in b.questions()]
    assert sorted(a.entities) != sorted(c.entities)


def test_world_shape_urls_and_no_praise_words(world):
    kinds = [e.kind for e in world.entities.values()]
    assert {k: kinds.count(k) for k in set(kinds)} == {"person": 6, "company": 6, "city": 6, "product": 6}
    assert all(u.startswith("https://wiki.example/") for u in world.pages)
    assert all(praise_count(p.render()) == 0 for p in world.pages.values())
    for e in world.entities.values():  # every value points at an entity of the right kind
        for a in ("born_in", "headquarters", "founder", "maker"):
            if a in e.attrs:
                assert e.attrs[a] in world.entities


def test_every_question_is_answered_by_its_oracle_plan(world):
    qs = world.questions("train")
    assert {q.hops for q in qs} == {1, 2}
    for q in qs:
        env = FactSearchEnv(world, q)
        obs, info = env.reset(seed=0)
        check_info(info)
        for a in world.oracle_plan(q):
            assert a in info["admissible_commands"], (q.qid, a)
            obs, r, term, trunc, info = env.step(a)
            check_info(info)
            assert not trunc
        assert term and r == 1.0 and info["won"]


def test_phrasings_differ_between_splits_but_answers_do_not(world):
    tr, te = world.questions("train"), world.questions("test")
    assert [q.answer for q in tr] == [q.answer for q in te]
    assert all(a.text != b.text for a, b in zip(tr, te))


def test_search_layout_and_lucky_snippet(world):
    q = next(q for q in world.questions() if q.chain == ("birth_year",))
    env = FactSearchEnv(world, q)
    env.reset(seed=0)
    obs, *_ = env.step(f"web_search: {q.entities[0]} birth year")
    first = obs.split("\n")[:4]
    assert re.fullmatch(r"\[1\] https://wiki\.example/\S+", first[0])
    assert first[1].startswith("Title: ") and first[2].startswith("Snippet: ") and first[3] == "Date: N/A"
    assert q.answer in first[2]  # the one-hop answer sits in the best snippet


def test_hidden_middle_entity_is_not_offered_before_it_is_seen(world):
    q = next(q for q in world.questions() if q.hops == 2)
    _, info = FactSearchEnv(world, q).reset(seed=0)
    assert not any(q.entities[1] in c for c in info["admissible_commands"])
    assert not any(c.startswith("answer:") for c in info["admissible_commands"])


def test_stingy_withholds_the_answer_and_paginates(world):
    q = next(q for q in world.questions() if q.chain == ("birth_year",))
    query = f"{q.entities[0]} birth year"
    plain = FactSearchEnv(world, q).tool_output(f"web_search: {query}")[0]
    stingy = FactSearchEnv(world, q, FactSearchConfig(stingy=True, page_size=3)).tool_output(
        f"web_search: {query}")[0]
    snip = lambda o: [ln for ln in o.split("\n") if ln.startswith("Snippet: ")]  # noqa: E731
    assert any(normalise(q.answer) in normalise(s) for s in snip(plain))
    assert not any(normalise(q.answer) in normalise(s) for s in snip(stingy))
    assert len(snip(stingy)) <= 3
    res = world.search(query, k=10)
    if len(res) > 3:
        assert stingy.endswith(MORE_RESULTS)
    assert apply_control(res, world, q, page_size=2).count("[") >= 2


def test_error_rate_one_gives_the_service_error_and_zero_never(world):
    q = world.questions()[0]
    env = FactSearchEnv(world, q, FactSearchConfig(error_rate=1.0))
    env.reset(seed=1)
    assert env.step(f"web_search: {q.entities[0]}")[0] == SERVICE_ERROR
    env = FactSearchEnv(world, q)
    env.reset(seed=1)
    assert all(env.step(f"web_search: {q.entities[0]}")[0] != SERVICE_ERROR for _ in range(5))


def test_error_rate_frequency_tightens_with_samples(world):
    q = world.questions()[0]
    hits = 0
    for s in range(400):
        env = FactSearchEnv(world, q, FactSearchConfig(error_rate=0.25))
        env.reset(seed=s)
        hits += env.step("web_search: x")[0] == SERVICE_ERROR
    p = hits / 400
    assert abs(p - 0.25) < 4 * np.sqrt(0.25 * 0.75 / 400)


@pytest.mark.parametrize("action,start", [("web_search:", "Error: web_search needs"),
                                          ("web_search: " + "x" * 5000, "Error: argument too long"),
                                          ("web_search: !!!", "Error: the query has no searchable"),
                                          ("dance", "Error: unknown tool"),
                                          ("web_extractor: https://wiki.example/Nobody", "Error 404")])
def test_bad_input_gives_an_error_observation(world, action, start):
    env = FactSearchEnv(world, world.questions()[0])
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(action)
    assert obs.startswith(start) and r == 0.0 and not term
    assert info["invalid_action"] and info["feedback"].startswith("Error")
    check_info(info)


def test_wrong_answer_ends_with_zero_and_truncation_at_max_steps(world):
    q = world.questions()[0]
    env = FactSearchEnv(world, q, FactSearchConfig(max_steps=2))
    env.reset(seed=0)
    assert env.step("web_search: a")[3] is False
    assert env.step("web_search: a")[3] is True
    with pytest.raises(RuntimeError):
        env.step("web_search: a")
    env.reset(seed=0)
    obs, r, term, *_ = env.step("answer: nobody at all")
    assert (r, term) == (0.0, True)
    assert normalise("The  Dorton.") == "dorton"


def test_make_helpers_and_protocol():
    env = make_factsearch(1, 4, n_entities=16)
    assert isinstance(env, TextEnv)
    st = make_factsearch_stingy(1, 4, n_entities=16)
    assert st.config.stingy and st.config.page_size == 3 and st.question == env.question


def test_registered_names_make_the_env() -> None:
    from agentmill.envs.base import make

    plain, stingy = make("factsearch-v0", world_seed=3), make("factsearch-stingy-v0", world_seed=3)
    assert type(plain).__name__ == type(stingy).__name__ == "FactSearchEnv"
