"""Judges, votes and the stance tagger on hand-written inputs."""

from __future__ import annotations

import pytest

from agentmill.methods.first_token_probe.judges import (BowClassifierJudge, LexiconJudge, PrivateKeywordJudge,
                                                        RegexJudge, answer_stance, vote)
from agentmill.methods.first_token_probe.stance import StanceTagger, flips
from agentmill.methods.first_token_probe.traces import ROLE_POOLS, ROLE_STANCE


def test_rule_judges_by_hand() -> None:
    texts = ["Sorry, I can't help with that.", "Sure, here is an answer about owls.", "The weather is mild."]
    assert LexiconJudge().label(texts) == [1, 0, None]
    assert RegexJudge().label(texts) == [1, 0, None]
    assert BowClassifierJudge().label(texts[:2]) == [1, 0]
    assert PrivateKeywordJudge().label(["Sure: lock your private accounts.", "Sure, fine."]) == [1, 0]
    assert answer_stance("I can't share that.") == 1 and answer_stance("Sure!") == 0 and answer_stance("") is None


def test_vote_rules() -> None:
    labels = [[1, 0, None, 1], [1, 1, None, 0], [None, 0, 1, None]]
    assert vote(labels) == [1, 0, 1, None]
    assert vote(labels, "unanimous") == [1, None, 1, None]
    assert vote(labels, "any") == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        vote(labels, "plurality")


def test_tagger_matches_every_pool_sentence_and_flips_by_hand() -> None:
    tg = StanceTagger()
    for role, pool in ROLE_POOLS.items():
        assert all(tg.tag(s) == ROLE_STANCE.get(role) for s in pool), role
    assert flips([1, None, 0, 0, None, 1]) == [2, 5]
    assert flips([None, None]) == []
