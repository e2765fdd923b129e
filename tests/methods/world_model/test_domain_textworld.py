"""The TextWorld domain adapter on hand-written observations (the texts are copied from a tw-make game), and one
collection from a real generated game (slow)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentmill.methods.world_model.domain_textworld import (
    END_LINE,
    TextWorldDomain,
    card_facts,
    fact_text,
    facts_diff,
    game_seed,
    parse_textworld,
    sentences,
)
from agentmill.methods.world_model.judges import JudgeItem, RuleScorer, field_f1

ROOM = ("-= Recreation Zone =-\nYou arrive in a recreation zone. A normal kind of place.\n\n"
        "You make out a closed rectangular locker, which looks usual, right there by you.\n\n"
        "You don't like doors? Why not try going west, that entranceway is unblocked.")
TAKE = "You take the rectangular keycard from the locker."
INV = "You are carrying: a rectangular keycard."
WIN = ("You lock the rectangular locker.\n\nYour score has just gone up by one point.\n\n"
       "                                                       *** The End ***\n\n"
       "You scored 1 out of a possible 1, in 4 turns.")
FACTS = ["at(player, workshop)", "at(locker, workshop)", "at(rectangular locker, recreation zone)",
         "at(table, studio)", "in(rectangular keycard, locker)", "closed(rectangular locker)",
         "east_of(recreation zone, workshop)", "west_of(workshop, recreation zone)", "north_of(studio, workshop)",
         "south_of(workshop, studio)", "free(studio, workshop)", "match(rectangular keycard, rectangular locker)"]


def test_parse_a_room_by_hand() -> None:
    p = parse_textworld(ROOM)
    f = p.fields
    assert f["room"] == "recreation zone" and f["exits"] == ["west"] and f["feedback"] == []
    assert f["inventory"] is None and len(f["text"]) == 5
    assert ("agent", "room", "recreation zone") in p.facts and ("recreation zone", "exit", "west") in p.facts
    assert ("recreation zone", "text", "A normal kind of place.") in p.facts
    assert len(p.facts) == 1 + 5 + 1
    assert TextWorldDomain().schema_checks(p) == [True, True, True, True]


def test_parse_feedback_inventory_and_empty() -> None:
    p = parse_textworld(TAKE)
    assert p.fields["room"] is None and p.facts == {("game", "says", TAKE)}
    q = parse_textworld(INV)
    assert q.fields["inventory"] == ["rectangular keycard"] and ("agent", "carries", "rectangular keycard") in q.facts
    assert parse_textworld("You are carrying nothing.").fields["inventory"] == []
    assert ("agent", "carries", "nothing") in parse_textworld("You are carrying nothing.").facts
    listing = parse_textworld("You are carrying:\n  a key\n  an apple")
    assert listing.fields["inventory"] == ["key", "apple"]
    assert parse_textworld("") is None and parse_textworld("  \n ") is None
    assert sentences("Empty! What kind of nightmare is this? Yes.") == ["Empty!", "What kind of nightmare is this?",
                                                                        "Yes."]


def test_schema_checks_catch_markup_two_rooms_and_bad_case() -> None:
    d = TextWorldDomain()
    assert d.schema_checks(parse_textworld("<predicted_observation>\n" + TAKE)) == [True, True, True, False]
    assert d.schema_checks(parse_textworld(ROOM + "\n" + ROOM))[0] is False
    assert d.schema_checks(parse_textworld("-= recreation zone =-\nA place."))[1] is False
    assert d.schema_checks(parse_textworld("-= Hall =-"))[2] is False  # a room line without a description


def test_ground_truth_scores_perfectly_and_a_wrong_room_does_not() -> None:
    d = TextWorldDomain()
    card = d.card(FACTS)
    sc = RuleScorer(d)
    for obs in (ROOM, TAKE, INV, WIN):
        dims = sc.score_observation(obs, JudgeItem("", obs, (ROOM,), card)).as_dict()
        assert all(v in (0, 5) for v in dims.values()) and dims["factuality"] == 5
    wrong = ROOM.replace("Recreation Zone", "Studio").replace("recreation zone", "studio")
    dims = sc.score_observation(wrong, JudgeItem("", ROOM, (ROOM,), card))
    assert dims.factuality < 5 and dims.realism < 5  # the studio's card exit is south, the text says west
    assert field_f1(d, wrong, ROOM) == 0.0  # room-keyed facts, as KeyDoor's: a wrong room gets none right
    one_off = ROOM.replace("A normal kind of place.", "A dusty kind of place.")
    assert field_f1(d, one_off, ROOM) == pytest.approx(6 / 7)
    assert field_f1(d, TAKE, ROOM) == 0.0


def test_card_keeps_the_listed_predicates_sorted() -> None:
    card = TextWorldDomain().card(FACTS)
    lines = card.splitlines()
    assert lines == sorted(lines) and "free(studio, workshop)" not in card and "match(" not in card
    assert "closed(rectangular locker)" in lines and "north_of(studio, workshop)" in lines
    assert ("at", ("player", "workshop")) in card_facts(card)


def test_plausibility_against_the_card() -> None:
    d = TextWorldDomain()
    card = d.card(FACTS)
    assert d.plausibility_checks(parse_textworld(ROOM), card, ()) == [True, True]
    assert d.plausibility_checks(parse_textworld("-= Garage =-\nA garage. Try going north."), card, ()) == [False,
                                                                                                        False]
    assert d.plausibility_checks(parse_textworld("You are carrying: a sword."), card, ()) == [False]
    assert d.plausibility_checks(parse_textworld(INV), card, ()) == [True]


def test_consistency_compares_exits_of_the_same_room() -> None:
    d = TextWorldDomain()
    p = parse_textworld(ROOM)
    assert d.consistency_conflicts(p, (ROOM,)) == (0, 1)
    other = parse_textworld(ROOM.replace("going west", "going north"))
    assert d.consistency_conflicts(other, (ROOM,)) == (1, 1)
    assert d.consistency_conflicts(parse_textworld(TAKE), (ROOM,)) == (0, 0)


def test_reasoning_diff_outcome_and_admissible() -> None:
    d = TextWorldDomain()
    diff = facts_diff(["at(player, workshop)", "open(box)"], ["at(player, recreation zone)", "open(box)"])
    assert diff == ["now at(player, recreation zone)", "no longer at(player, workshop)"]
    r = d.reasoning("go east", ROOM, ROOM, diff, None)
    assert r.splitlines() == ["Action: go east.", "Preconditions: in the recreation zone.",
                              "Effects: now at(player, recreation zone); no longer at(player, workshop)."]
    assert d.reasoning("look", TAKE, TAKE, [], 1).splitlines()[1:] == [
        "Preconditions: where the last turn left off.", "Effects: no state change.",
        "Check: this is consistent with the card."]
    assert END_LINE in WIN and d.outcome_from_observation(WIN, "lock") == (1.0, True)
    assert d.outcome_from_observation(TAKE, "take") == (0.0, False)
    assert d.admissible_from_text(ROOM, None) == ["go west", "inventory", "look"]


def test_fact_text_and_game_seed() -> None:
    var = lambda n: SimpleNamespace(name=n)
    prop = SimpleNamespace(name="in", arguments=(var("rectangular keycard"), var("I")))
    assert fact_text(prop) == "in(rectangular keycard, inventory)"
    assert fact_text(SimpleNamespace(name="at", arguments=(var("P"), var("workshop")))) == "at(player, workshop)"
    assert game_seed("/x/tw_1003.z8") == 1003
    with pytest.raises(ValueError):
        game_seed("/x/game.z8")


@pytest.mark.slow
def test_collect_from_a_real_game(tmp_path, monkeypatch) -> None:
    pytest.importorskip("textworld")
    from agentmill.envs.textworld_env import make_games
    from agentmill.methods.world_model.domain_textworld import collect_textworld, textworld_table

    game = make_games(tmp_path / "games", 1, seed0=1000, calibrate=None)[0]
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    table = collect_textworld([(game, "test")], 2, max_steps=8, seed=0)
    rows = table.rows
    assert rows and {r.split for r in rows} == {"test"} and {r.task_id for r in rows} == {"tw_1000"}
    assert all(r.card and "at(player, " in r.card for r in rows)
    d = TextWorldDomain()
    sc = RuleScorer(d)
    for r in rows:
        assert r.changed == bool(r.diff)
        dims = sc.score_observation(r.next_obs, JudgeItem("", r.next_obs, (r.obs,), r.card)).as_dict()
        assert all(v in (0, 5) for v in dims.values()), (r.next_obs, dims)
        if r.action.startswith("go ") and r.changed:
            assert any(x.startswith("now at(player, ") for x in r.diff)
    again = textworld_table([(game, "test")], 2, max_steps=8, seed=0)
    assert [r.next_obs for r in again.rows] == [r.next_obs for r in rows]
    assert list((tmp_path / "cache" / "world_model").glob("textworld-v*/*/transitions.jsonl"))
