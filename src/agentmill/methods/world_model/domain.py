"""Domain adapters: what the world model needs to know about one environment (docs/methods/world_model.md).

A domain parses observations into typed fields and (entity, attribute, value) facts, renders the task card, writes
the template reasoning from the privileged state diff, and turns a *simulated* observation back into reward,
termination and the admissible commands (so a policy can act inside the simulator, and exploit its errors).

KeyDoor is implemented here; FactSearch in ``domain_factsearch.py`` (TextWorld and office are not; the method README
lists them).
"""

from __future__ import annotations

import re
from functools import lru_cache
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agentmill.envs.keydoor import (CARRIED, DISTRACTOR_NAMES, INVALID_FEEDBACK, ROOM_NAMES, USED,
                                    KeyDoorEnv, KeyDoorLayout)

Fact = tuple[str, str, str]

WIN_LINE = "*** You won! ***"

# The self-check pool of the template reasoning [R]: eight sentences, four with a praise-lexicon word, so an SFT
# completion carries about 0.5 lexicon matches on average.
CHECKS = ("Check: room and inventory agree with the history.",
          "Check: this is consistent with the card.",
          "Check: the exits follow the card.",
          "Check: the inventory is accurate.",
          "Check: nothing else moves.",
          "Check: the result is correct for this room.",
          "Check: the state follows from the action.",
          "Check: verified against the card.")


@dataclass(frozen=True)
class Parsed:
    """Typed fields of one observation; ``facts`` are the objective (entity, attribute, value) triples."""

    fields: dict[str, Any]
    facts: frozenset[Fact]
    lines: tuple[str, ...]
    extra: tuple[str, ...] = field(default=())


class Domain(Protocol):
    """What a world model needs from an environment."""

    name: str
    qwen_domain: str | None

    def card(self, task: Any) -> str | None: ...
    def parse(self, obs: str) -> Parsed | None: ...
    def schema_checks(self, p: Parsed) -> list[bool]: ...
    def plausibility_checks(self, p: Parsed, card: str | None, window: Sequence[str]) -> list[bool]: ...
    def consistency_conflicts(self, p: Parsed, window: Sequence[str]) -> tuple[int, int]: ...
    def reasoning(self, action: str, obs: str, next_obs: str, diff: Sequence[str], check: int | None) -> str: ...
    def outcome_from_observation(self, obs: str, action: str) -> tuple[float, bool]: ...
    def admissible_from_text(self, obs: str, card: str | None) -> list[str]: ...


_ROOM = re.compile(r"^-= (.+) =-$")


def _items(phrase: str) -> list[str]:
    """``"a red key, a lamp and an apple"`` → ``["red key", "lamp", "apple"]``."""
    parts = [p for chunk in phrase.split(", ") for p in chunk.split(" and ")]
    return [re.sub(r"^(a|an|the) ", "", p.strip()) for p in parts if p.strip()]


class KeyDoorDomain:
    """KeyDoor observations: an optional feedback line, ``-= Room =-``, ``You see …``, optional chest/well lines,
    ``Exits: …``, ``You are carrying …`` (``envs/keydoor.py``)."""

    name = "keydoor"
    qwen_domain = None  # text games have no Qwen counterpart

    # ---- card ------------------------------------------------------------------------------------------------------
    def card(self, layout: KeyDoorLayout) -> str:
        """One line per room (exits, locked doors, items at the start), then the chest line [R]."""
        doors = {(a, d): i for i, (a, d, _b) in enumerate(layout.doors)}
        for i, (a, d, b) in enumerate(layout.doors):
            opp = {"north": "south", "south": "north", "east": "west", "west": "east"}[d]
            doors[(b, opp)] = i
        lines = []
        for r, name in enumerate(layout.rooms):
            ex = []
            for d, b in layout.exits[r]:
                i = doors.get((r, d))
                ex.append(f"{d}={layout.rooms[b]}" + (f" [{layout.colours[i]} door]" if i is not None else ""))
            items = [f"{layout.colours[i]} key" for i, k in enumerate(layout.key_rooms) if k == r]
            items += [o for o, k in zip(layout.distractors, layout.distractor_rooms) if k == r]
            lines.append(f"{name}: {'; '.join(ex)}; items={', '.join(items) if items else 'none'}")
        lines.append(f"chest: {layout.rooms[layout.chest_room]}")
        return "\n".join(lines)

    # ---- parsing -----------------------------------------------------------------------------------------------------
    def parse(self, obs: str) -> Parsed | None:
        """Typed fields and facts of a KeyDoor observation, or None without a room line (cached: read-only)."""
        return _parse_keydoor(obs)

    def schema_checks(self, p: Parsed) -> list[bool]:
        f = p.fields
        return [f["items"] is not None, f["exits"] is not None, f["inventory"] is not None, not p.extra,
                p.lines[-1].startswith("You are carrying ")]

    def plausibility_checks(self, p: Parsed, card: str | None, window: Sequence[str]) -> list[bool]:
        """Referential integrity against the card: the room exists, its exits are the card's, items exist [R]."""
        f = p.fields
        if not card:
            return [f["room"] in ROOM_NAMES]
        rooms = {}
        for ln in card.splitlines():
            name, _, rest = ln.partition(": ")
            if name != "chest":
                rooms[name] = rest
        checks = [f["room"] in rooms]
        spec = rooms.get(f["room"], "")
        card_dirs = sorted(re.findall(r"(north|south|east|west)=", spec))
        got_dirs = sorted(e.split(" ")[0] for e in (f["exits"] or []))
        checks.append(card_dirs == got_dirs)
        known = set(re.findall(r"(\w+ key)", card)) | {o for o in DISTRACTOR_NAMES if o in card}
        checks.append(all(it in known for it in (f["items"] or []) + (f["inventory"] or [])))
        return checks

    def consistency_conflicts(self, p: Parsed, window: Sequence[str]) -> tuple[int, int]:
        """(conflicts, checked): exits of a room already described in the window must not change, except a locked
        door that became unlocked [R]."""
        conflicts = checked = 0
        for w in window:
            q = self.parse(w)
            if q is None or q.fields["room"] != p.fields["room"] or q.fields["exits"] is None:
                continue
            before = {e.split(" ")[0]: e for e in q.fields["exits"]}
            for e in p.fields["exits"] or []:
                d = e.split(" ")[0]
                checked += 1
                if d not in before or (before[d] != e and "locked" not in before[d]):
                    conflicts += 1
        return conflicts, checked

    # ---- reasoning -----------------------------------------------------------------------------------------------
    def reasoning(self, action: str, obs: str, next_obs: str, diff: Sequence[str], check: int | None) -> str:
        """Four lines from the oracle diff (privileged-information distillation [R]): Action, Preconditions,
        Effects, Check (``check`` indexes :data:`CHECKS`; None drops the line)."""
        p = self.parse(obs)
        room = p.fields["room"] if p else "room"
        inv = ", ".join(p.fields["inventory"] or []) if p and p.fields["inventory"] else "nothing"
        lines = [f"Action: {action}.", f"Preconditions: in the {room}, carrying {inv}.",
                 "Effects: " + ("; ".join(diff) if diff else "no state change") + "."]
        if check is not None:
            lines.append(CHECKS[check % len(CHECKS)])
        return "\n".join(lines)

    # ---- simulator hooks -------------------------------------------------------------------------------------------
    def outcome_from_observation(self, obs: str, action: str) -> tuple[float, bool]:
        """Reward and termination read from a (simulated) observation: the win line gives +1 and ends the episode;
        the invalid-command line costs the env's default invalid penalty [R]."""
        if WIN_LINE in obs:
            return 1.0, True
        if INVALID_FEEDBACK in obs:
            return -0.1, False
        return 0.0, False

    def admissible_from_text(self, obs: str, card: str | None) -> list[str]:
        """Commands the (simulated) text affords, sorted: ``look``/``wait``/``inventory``, ``go`` for every open
        exit, take/examine for items here, examine/unlock for carried keys, open/examine chest. A hallucinated
        exit becomes a command the policy can learn to exploit."""
        p = self.parse(obs)
        if p is None:
            return ["inventory", "look", "wait"]
        f = p.fields
        out = {"look", "wait", "inventory"}
        locked = []
        for e in f["exits"] or []:
            d = e.split(" ")[0]
            if "locked" in e:
                locked.append(d)
            else:
                out.add(f"go {d}")
        for it in f["items"] or []:
            out |= {f"take {it}", f"examine {it}"}
        for it in f["inventory"] or []:
            out.add(f"examine {it}")
            if it.endswith(" key"):
                out |= {f"unlock {d} door with {it}" for d in locked}
        if f["chest"] == "closed":
            out |= {"open chest", "examine chest"}
        if f["well"]:
            out.add("examine well")
        return sorted(out)

    # ---- corruption (M-2) ------------------------------------------------------------------------------------------
    def corrupt(self, obs: str, k: int, rng: np.random.Generator) -> str:
        """``obs`` with ``k`` distinct objective fields changed (room name, an item, an exit, the inventory, the
        feedback); each corruption hits a different fact, so factuality can only fall as ``k`` grows."""
        lines = obs.strip().split("\n")
        slots = []
        for i, ln in enumerate(lines):
            if _ROOM.match(ln):
                slots.append((i, "room"))
            elif ln.startswith("You see ") or ln.startswith("You are carrying ") or ln.startswith("Exits: "):
                slots.append((i, "list"))
            elif i == 0:
                slots.append((i, "feedback"))
        order = rng.permutation(len(slots))[:k]
        for s in order:
            i, kind = slots[s]
            ln = lines[i]
            if kind == "room":
                cur = _ROOM.match(ln).group(1).lower()  # type: ignore[union-attr]
                new = [r for r in ROOM_NAMES if r != cur][int(rng.integers(len(ROOM_NAMES) - 1))]
                lines[i] = f"-= {new.title()} =-"
            elif kind == "feedback":
                lines[i] = ["You hear a distant noise.", "The floor creaks.", "A draught passes."][int(rng.integers(3))]
            else:  # a list line: every element replaced by a wrong one, the count kept (so F1 can only fall)
                p = self.parse("-= X =-\n" + ln)
                f = p.fields if p is not None else {}
                if ln.startswith("Exits: "):
                    n = max(1, len(f.get("exits") or []))
                    lines[i] = "Exits: " + ", ".join(_FAKE_EXITS[:n]) + "."
                elif ln.startswith("You see "):
                    n = max(1, len(f.get("items") or []))
                    lines[i] = "You see " + _join_fake(_FAKE_ITEMS[int(rng.integers(3)):][:n]) + "."
                else:
                    n = max(1, len(f.get("inventory") or []))
                    lines[i] = "You are carrying " + _join_fake(_FAKE_ITEMS[3 + int(rng.integers(3)):][:n]) + "."
        return "\n".join(lines)





@lru_cache(maxsize=65536)
def _parse_keydoor(obs: str) -> Parsed | None:
    lines = tuple(ln.strip() for ln in obs.strip().splitlines() if ln.strip())
    idx = next((i for i, ln in enumerate(lines) if _ROOM.match(ln)), None)
    if idx is None:
        return None
    room = _ROOM.match(lines[idx]).group(1).lower()  # type: ignore[union-attr]
    f: dict[str, Any] = {"feedback": " ".join(lines[:idx]), "room": room, "items": None, "chest": None,
                         "well": False, "exits": None, "inventory": None, "used": []}
    extra = []
    for ln in lines[idx + 1:]:
        if ln.startswith("You see "):
            body = ln[len("You see "):].rstrip(".")
            f["items"] = [] if body == "nothing special" else _items(body)
        elif ln in ("There is a closed chest here.", "There is an open chest here."):
            f["chest"] = "open" if "open" in ln else "closed"
        elif ln == "There is a deep well here.":
            f["well"] = True
        elif ln.startswith("Exits: "):
            f["exits"] = [e.strip() for e in ln[len("Exits: "):].rstrip(".").split(", ") if e.strip()]
        elif ln.startswith("You are carrying "):
            body, _, used = ln[len("You are carrying "):].partition(" Keys left in their locks: ")
            body = body.rstrip(".")
            f["inventory"] = [] if body == "nothing" else _items(body)
            f["used"] = [u.strip() for u in used.rstrip(".").split(", ") if u.strip()]
        else:
            extra.append(ln)
    facts: set[Fact] = {("agent", "room", room)}
    if f["feedback"]:
        facts.add(("game", "feedback", f["feedback"]))
    for it in f["items"] or []:
        facts.add((room, "item", it))
    if f["items"] == []:
        facts.add((room, "item", "nothing"))
    if f["chest"]:
        facts.add((room, "chest", f["chest"]))
    if f["well"]:
        facts.add((room, "well", "yes"))
    for e in f["exits"] or []:
        facts.add((room, "exit", e))
    for it in f["inventory"] or []:
        facts.add(("agent", "carries", it))
    if f["inventory"] == []:
        facts.add(("agent", "carries", "nothing"))
    for u in f["used"]:
        facts.add(("lock", "used", u))
    for ln in extra:
        facts.add(("game", "extra", ln))
    return Parsed(f, frozenset(facts), lines, tuple(extra))


_FAKE_EXITS = ("up", "down", "northeast", "southwest")
_FAKE_ITEMS = ("silver spoon", "brass bell", "tin cup", "glass bead", "iron nail", "paper crane", "wooden top",
               "clay pot", "copper ring")


def _join_fake(items: Sequence[str]) -> str:
    named = [f"a {x}" for x in items]
    return " and ".join(named) if len(named) <= 2 else ", ".join(named[:-1]) + " and " + named[-1]


def keydoor_diff(env: KeyDoorEnv, before: tuple, after: tuple) -> list[str]:
    """The privileged state changes between two KeyDoor states, in words (for the reasoning and ``changed``)."""
    lay = env.layout
    out = []
    if before[0] != after[0]:
        out.append(f"the agent moves to the {lay.rooms[after[0]]}")
    for i, (a, b) in enumerate(zip(before[1], after[1])):
        if a != b:
            key = f"{lay.colours[i]} key"
            out.append(f"the {key} is now " + ("carried" if b == CARRIED else "in its lock" if b == USED
                                                else f"in the {lay.rooms[b]}"))
    for j, (a, b) in enumerate(zip(before[2], after[2])):
        if a != b:
            out.append(f"the {lay.distractors[j]} is now " + ("carried" if b == CARRIED else f"in the {lay.rooms[b]}"))
    if before[3] != after[3]:
        out.append("the chest opens and the task is won")
    return out
