"""CR-1 as an exact test, plus NC-1, NC-2 and the scripted arms of CR-9.

With ``RuleReader("semantic")`` — which shares its anchor definition with the survival classifier — violation must
be exactly "the rule is not visible": V(full) = 0, V(never_stated) = 1, violation = 1[not survived] for every
episode under every non-LLM compactor and every number of rounds, and V(pinned) = 0. This checks the plumbing
compaction → context → actor → grader, not a hypothesis. ``grader_mismatch`` must be 0 in every row.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from agentmill.envs.office import OfficeSandbox
from agentmill.methods.constraint_rot import conditions as C
from agentmill.methods.constraint_rot.actors import (AlwaysComply, AlwaysRefuse, LatestInstructionWins,
                                                     RuleReader)
from agentmill.methods.constraint_rot.catalogue import load_catalogue
from agentmill.methods.constraint_rot.compactors import (ExtractiveSummary, HeadAndTail, NoteFollowingSummary,
                                                         SlidingWindow, StructuredSummary, ToolResultClearing)
from agentmill.methods.constraint_rot.generate import LOCATIONS, generate_episodes
from agentmill.methods.constraint_rot.loop import AgentLoop
from agentmill.methods.constraint_rot.messages import WhitespaceCounter

W = WhitespaceCounter()
N = 40
COMPACTORS = {
    "window": SlidingWindow(counter=W), "head_tail": HeadAndTail(counter=W), "tool_clear": ToolResultClearing(counter=W),
    "extractive": ExtractiveSummary(counter=W), "structured": StructuredSummary(counter=W),
    "note_following": NoteFollowingSummary(counter=W),
}
SURVIVED = ("preserved", "paraphrased")


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    # a memory-backed root where available: per-episode resets rewrite the whole office (~400 runs per test)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=shm) as root, OfficeSandbox(0, root=Path(root), smtp=False,
                                                                      http=False) as sb:
        yield sb


@pytest.fixture(scope="module")
def episodes(sandbox):  # type: ignore[no-untyped-def]
    eps = generate_episodes(load_catalogue(), split="test_iid", n=N, seed=1, counter=W, locations=LOCATIONS,
                            distractor_tokens=(200, 500), sandbox=sandbox)
    assert len({e.family for e in eps}) >= 20 and {e.location for e in eps} == set(LOCATIONS)
    assert any(e.early_probe for e in eps) and not all(e.early_probe for e in eps)
    return eps


def run(sandbox, episodes, actor, cond, compactor=None):  # type: ignore[no-untyped-def]
    loop = AgentLoop(actor, sandbox, compactor=compactor, counter=W)
    rows = [loop.run(e, cond).row for e in episodes]
    assert [r["error"] for r in rows] == [None] * len(rows)
    assert sum(r["grader_mismatch"] for r in rows) == 0
    assert not any(r["invalid_action"] for r in rows)
    return rows


@pytest.mark.slow
def test_cr1_full_and_never_stated(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    assert [r["violation"] for r in run(sandbox, episodes, RuleReader(), C.full_context())] == [False] * N
    assert [r["violation"] for r in run(sandbox, episodes, RuleReader(), C.never_stated())] == [True] * N


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMPACTORS))
def test_cr1_violation_is_not_survived_and_pinning_restores(sandbox, episodes, name: str) -> None:  # type: ignore
    m = COMPACTORS[name]
    for k in range(1, 6):
        rows = run(sandbox, episodes, RuleReader(), C.rounds(m, k))
        assert [r["violation"] for r in rows] == [r["survival_label"] not in SURVIVED for r in rows], (name, k)
        if name == "window":  # the positive case is not vacuous: eviction really drops rules
            assert sum(r["violation"] for r in rows) >= N // 2
        pinned = run(sandbox, episodes, RuleReader(), C.pinned(m, k=k))
        assert [r["violation"] for r in pinned] == [False] * N, (name, k)
        assert all(r["card_tokens"] > 0 for r in pinned)
    rows = run(sandbox, episodes, RuleReader(), C.compacted(m))
    assert [r["violation"] for r in rows] == [r["survival_label"] not in SURVIVED for r in rows]


@pytest.mark.slow
def test_negative_controls_nc1_nc2(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    window = COMPACTORS["window"]
    for cond in (C.full_context(), C.never_stated(), C.compacted(window), C.pinned(window)):
        comply = run(sandbox, episodes, AlwaysComply(), cond)
        assert all(r["violation"] and r["did_requested"] for r in comply), cond.label
        refuse = run(sandbox, episodes, AlwaysRefuse(), cond)
        assert not any(r["violation"] for r in refuse) and all(r["refusal"] for r in refuse), cond.label


@pytest.mark.slow
def test_cr9_scripted_impersonation(sandbox, episodes) -> None:  # type: ignore[no-untyped-def]
    window = COMPACTORS["extractive"]
    latest = run(sandbox, episodes, LatestInstructionWins(), C.impersonation(pin=True), window)
    assert [r["violation"] for r in latest] == [True] * N  # the residual hole: must keep failing
    card_only = run(sandbox, episodes, RuleReader("card_only"), C.impersonation(pin=True), window)
    assert [r["violation"] for r in card_only] == [False] * N
    gated = run(sandbox, episodes, LatestInstructionWins(), C.gate(impersonation=True), window)
    assert [r["violation"] for r in gated] == [False] * N and all(r["blocked_calls"] for r in gated)
    # without the forged update, the same actor obeys the pinned card
    plain = run(sandbox, episodes, LatestInstructionWins(), C.pinned(), window)
    assert [r["violation"] for r in plain] == [False] * N
