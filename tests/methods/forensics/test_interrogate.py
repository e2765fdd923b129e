"""Interrogation and the belief test with its instrument positive control."""

from __future__ import annotations

from agentmill.methods.forensics import belief_test, interrogate
from agentmill.methods.forensics.interrogate import PlantedInterrogatee, keyword_judge
from agentmill.methods.forensics.interrogate import blind_judge


def test_first_and_third_person_rates() -> None:
    agent = PlantedInterrogatee()
    judge = keyword_judge("yes, legitimate")
    first = interrogate(None, agent, person="first", question="legitimate", judge=judge, n=400)
    third = interrogate(None, agent, person="third", question="legitimate", judge=judge, n=400)
    assert first.lo <= 0.8 <= first.hi and third.value == 0.0


def test_belief_test_is_insensitive_without_a_working_instrument() -> None:
    agent = PlantedInterrogatee()
    admits = keyword_judge("yes, it knew")
    assert belief_test(agent, person="first", judge=admits, believes=True).verdict == "insensitive"
    assert belief_test(agent, person="third", judge=blind_judge, believes=True).verdict == "insensitive"
    assert belief_test(agent, person="third", judge=admits, believes=True).verdict == "supported"
    assert belief_test(agent, person="third", judge=admits, believes=False).verdict == "refuted"
