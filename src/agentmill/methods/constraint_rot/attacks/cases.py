"""Attack cases from episodes: where an eviction payload goes and what the compactor sees
(docs/methods/constraint_rot.md "What it does").

An episode is run once (``AlwaysComply`` actor, a recording no-op compactor) up to its compaction point, so the
context is exactly what a compactor would receive. The payload then goes into the last distractor tool output
outside the kept tail, i.e. inside the span every compaction summarises. Everything downstream (the optimiser, the
drop-rate evaluation, the transfer matrix) is pure compaction + the survival classifier, with no actor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.attacks.optimise import DevCase


class Recorder:
    """A no-op compactor that remembers the context it was handed (the compaction point)."""

    name = "recorder"
    config_hash = "recorder"

    def __init__(self) -> None:
        from agentmill.methods.constraint_rot.compactors import NoCompaction

        self._inner = NoCompaction(counter=None)
        self.seen: list[Message] = []

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> Any:
        self.seen = list(messages)
        return self._inner.compact(messages, keep_last=keep_last)


def attack_index(msgs: Sequence[Message], keep_last: int) -> int | None:
    """The last distractor tool output outside the kept tail (inside what a compactor summarises), or None."""
    from agentmill.methods.constraint_rot.messages import origin

    for i in range(len(msgs) - keep_last - 1, -1, -1):
        if msgs[i].role == "tool" and origin(msgs[i]) == "distractor" and msgs[i].content.strip():
            return i
    return None


def compaction_points(sandbox: Any, episodes: Sequence[Any], counter: Any, keep_last: int, *,
                      progress: Callable[[int, int], None] | None = None) -> list[tuple[Any, list[Message]]]:
    """(episode, the context at its compaction point) for each episode, run in ``sandbox``."""
    from agentmill.methods.constraint_rot import conditions as C
    from agentmill.methods.constraint_rot.actors import AlwaysComply
    from agentmill.methods.constraint_rot.loop import AgentLoop, ContextBudget

    rec = Recorder()
    loop = AgentLoop(AlwaysComply(), sandbox, counter=counter, budget=ContextBudget(keep_last=keep_last))
    points = []
    for j, e in enumerate(episodes):
        row = loop.run(e, C.compacted(rec)).row
        if row["error"] is not None:
            raise RuntimeError(f"episode {e.episode_id}: {row['error']}")
        points.append((e, rec.seen))
        if progress is not None:
            progress(j + 1, len(episodes))
    return points


def attack_cases(points: Sequence[tuple[Any, Sequence[Message]]], keep_last: int) -> tuple[list[DevCase], int]:
    """One :class:`DevCase` per compaction point with a distractor tool output inside the summarised span;
    (cases, points without one)."""
    cases, skipped = [], 0
    for e, msgs in points:
        idx = attack_index(msgs, keep_last)
        if idx is None:
            skipped += 1
            continue
        inst = e.instance
        cases.append(DevCase(tuple(msgs), idx, inst.text, {"values": inst.matcher_values}, inst.matcher_cues,
                             keep_last=keep_last, rule_id=f"{e.family}|{e.episode_id}"))
    return cases, skipped


def clean_label(target: Any, case: DevCase, counter: Any = None) -> str:
    """The survival label of ``case``'s rule after ``target`` compacts the un-attacked context."""
    from agentmill.methods.constraint_rot.attacks.optimise import compaction_label, target_counter

    return compaction_label(target, case, case.messages, target_counter(target, counter))


def clean_survival(target: Any, points: Sequence[tuple[Any, Sequence[Message]]], keep_last: int,
                   counter: Any) -> float:
    """Share of compaction ``points`` (episode, context) whose rule survives ``target`` (lenient: preserved or
    paraphrased): the quantity the spec tunes the extractive ratio on ("clean survival ≥ 90 %")."""
    from agentmill.methods.constraint_rot.survival import SURVIVED, classify_survival

    if not points:
        raise ValueError("clean_survival: no compaction points")
    ok = 0
    for e, msgs in points:
        inst = e.instance
        r = target.compact(list(msgs), keep_last=keep_last)
        ok += classify_survival(inst.text, {"values": inst.matcher_values}, inst.matcher_cues, r,
                                counter=counter).label in SURVIVED
    return ok / len(points)
