"""The TextWorld domain adapter: what a world model needs to simulate a TextWorld game (docs/methods/world_model.md).

Observations are the cleaned game texts of ``envs/textworld_env.py`` (banner, prompt and status line stripped): a
room (``-= Room =-`` and prose paragraphs), or a feedback message ("You take the key from the locker.", "You are
carrying nothing.", "That's not a verb I recognise."), or the end text. TextWorld prose is generated when the game is
compiled, so the same state always prints the same sentences; the parsed facts are therefore sentence-level [R]:
``("agent", "room", r)``, ``(r, "text", sentence)`` for each sentence after the room line, ``(r, "exit", d)`` for each
compass direction the room text names, ``("game", "says", sentence)`` for each feedback sentence, and
``("agent", "carries", item)`` from an inventory listing.

The card is the task's static specification [R]: the game's *initial* logical facts (requested from TextWorld with
``EnvInfos(facts=True)``), one per line: ``at``/``in``/``on``/``link``/``locked``/``closed``/``open`` and the four
direction relations (``north_of(studio, workshop)``: the studio lies north of the workshop), the player as
``player`` and the inventory as ``inventory``. The template reasoning comes from the diff of those facts before and
after the action (privileged information, as KeyDoor's oracle diff).

Transitions come from a seeded behaviour policy (the game's tracked winning plan with probability 0.5 per step, a
uniform admissible command with 0.4, an invalid string with 0.1, as KeyDoor's collector mixes them [R]) over
locally generated games; games and transitions are cached under ``core.paths.cache_root()/world_model/``.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.core.seeding import derive_seed
from agentmill.methods.world_model.data import Transition, TransitionTable
from agentmill.methods.world_model.domain import CHECKS, Parsed

TEXTWORLD_VERSION = "1"
"""Bumped whenever collection or rendering here changes, so cached transitions are never served to newer code."""

DIRECTIONS = ("north", "south", "east", "west")
CARD_PREDICATES = ("at", "in", "on", "link", "locked", "closed", "open", "north_of", "south_of", "east_of", "west_of")
"""Initial facts the card shows [R: the design names at/in/on/link/locked/closed; open and the direction relations
are added because exits and containers cannot be predicted without them]."""
INVALID_STRINGS = ("dance", "go up", "eat the door", "open window", "climb", "take sword", "jump")
"""Deliberate invalid commands of the behaviour policy (KeyDoor's list)."""
END_LINE = "*** The End ***"
LOST_LINE = "*** You lost! ***"
SCORE_UP = re.compile(r"Your score has just gone up by (\w+) points?\.")

_ROOM = re.compile(r"^-= (.+) =-$")
_TITLE = re.compile(r"^-= [A-Z][a-z']*(?: [A-Z][a-z']*)* =-$")
_SENT = re.compile(r"(?<=[.!?])\s+(?=\S)")
_MARKUP = re.compile(r"<|>|`|\{|\}|(?<!\*)\*\*(?!\*)")
_NAMES = {"P": "player", "I": "inventory"}


def fact_text(prop: Any) -> str:
    """A TextWorld proposition as ``name(arg, …)`` without types; P → player, I → inventory."""
    args = ", ".join(_NAMES.get(v.name, v.name) for v in prop.arguments)
    return f"{prop.name}({args})"


def sentences(text: str) -> list[str]:
    """Sentences of one prose line (split after . ! ? followed by space)."""
    return [s.strip() for s in _SENT.split(text.strip()) if s.strip()]


def _items(phrase: str) -> list[str]:
    parts = [p for chunk in phrase.split(", ") for p in chunk.split(" and ")]
    return [re.sub(r"^(a|an|the|some) ", "", p.strip().rstrip(".")) for p in parts if p.strip().rstrip(".")]


@lru_cache(maxsize=65536)
def parse_textworld(obs: str) -> Parsed | None:
    """Typed fields and facts of a TextWorld observation, or None when it is empty."""
    lines = tuple(ln.strip() for ln in obs.strip().splitlines() if ln.strip())
    if not lines:
        return None
    heads = [i for i, ln in enumerate(lines) if _ROOM.match(ln)]
    idx = heads[0] if heads else len(lines)
    room = _ROOM.match(lines[idx]).group(1).lower() if heads else None  # type: ignore[union-attr]
    feedback = [s for ln in lines[:idx] for s in sentences(ln)]
    text = [s for ln in lines[idx + 1:] if not _ROOM.match(ln) for s in sentences(ln)]
    inventory: list[str] | None = None
    for k, ln in enumerate(lines[:idx]):
        if ln == "You are carrying nothing.":
            inventory = []
        elif ln.startswith("You are carrying:"):
            rest = ln[len("You are carrying:"):].strip()
            inventory = _items(rest) if rest else [x for later in lines[k + 1:idx] for x in _items(later)]
    facts: set[tuple[str, str, str]] = {("game", "says", s) for s in feedback}
    if room is not None:
        facts.add(("agent", "room", room))
        facts |= {(room, "text", s) for s in text}
        low = " ".join(text).lower()
        facts |= {(room, "exit", d) for d in DIRECTIONS if re.search(rf"\b{d}\b", low)}
    if inventory is not None:
        facts |= {("agent", "carries", it) for it in inventory} or {("agent", "carries", "nothing")}
    fields = {"room": room, "feedback": feedback, "text": text, "inventory": inventory, "n_rooms": len(heads),
              "exits": sorted({d for d in DIRECTIONS if room is not None and (room, "exit", d) in facts})}
    return Parsed(fields, frozenset(facts), lines)


def card_facts(card: str | None) -> list[tuple[str, tuple[str, ...]]]:
    """(predicate, args) of every card line."""
    out = []
    for ln in (card or "").splitlines():
        m = re.match(r"^(\w+)\((.*)\)$", ln.strip())
        if m:
            out.append((m.group(1), tuple(a.strip() for a in m.group(2).split(","))))
    return out


class TextWorldDomain:
    """TextWorld observations for the world model (module docstring)."""

    name = "textworld"
    qwen_domain = None  # text games have no Qwen counterpart

    # ---- card ----------------------------------------------------------------------------------------------------
    def card(self, facts: Sequence[str]) -> str:
        """The initial facts of :data:`CARD_PREDICATES`, one per line, sorted."""
        keep = [f for f in facts if f.split("(")[0] in CARD_PREDICATES]
        return "\n".join(sorted(keep))

    # ---- parsing ---------------------------------------------------------------------------------------------------
    def parse(self, obs: str) -> Parsed | None:
        return parse_textworld(obs)

    def schema_checks(self, p: Parsed) -> list[bool]:
        """At most one room line, in the game's title case, followed by a description; no markup from the prompt
        format [R]. (The game's prose has no fixed form: object descriptions may open in lower case or end without
        a full stop, so sentences are not checked.)"""
        heads = [i for i, ln in enumerate(p.lines) if _ROOM.match(ln)]
        return [len(heads) <= 1, all(_TITLE.match(p.lines[i]) for i in heads),
                all(i + 1 < len(p.lines) for i in heads), not any(_MARKUP.search(ln) for ln in p.lines)]

    def plausibility_checks(self, p: Parsed, card: str | None, window: Sequence[str]) -> list[bool]:
        """Referential integrity against the card [R]: the room exists, the exits the text names are the card's
        exits of that room, carried items are entities of the card."""
        f = p.fields
        if not card:
            return [f["room"] is None or bool(_TITLE.match(f"-= {f['room'].title()} =-"))]
        cf = card_facts(card)
        rooms = {a[1] for n, a in cf if n == "at" and len(a) == 2} | {x for n, a in cf if n.endswith("_of")
                                                                    for x in a}
        entities = {a[0] for n, a in cf if n in ("at", "in", "on") and a} - {"player"}
        checks = []
        if f["room"] is not None:
            checks.append(f["room"] in rooms)
            card_dirs = sorted({n[:-3] for n, a in cf if n.endswith("_of") and len(a) == 2 and a[1] == f["room"]})
            checks.append(f["exits"] == card_dirs)
        if f["inventory"] is not None:
            checks.append(all(it in entities for it in f["inventory"]))
        return checks or [True]

    def consistency_conflicts(self, p: Parsed, window: Sequence[str]) -> tuple[int, int]:
        """(conflicts, checked): a room already described in the window must name the same exits [R]."""
        conflicts = checked = 0
        if p.fields["room"] is None:
            return 0, 0
        for w in window:
            q = self.parse(w)
            if q is None or q.fields["room"] != p.fields["room"]:
                continue
            checked += 1
            conflicts += q.fields["exits"] != p.fields["exits"]
        return conflicts, checked

    # ---- reasoning -------------------------------------------------------------------------------------------------
    def reasoning(self, action: str, obs: str, next_obs: str, diff: Sequence[str], check: int | None) -> str:
        """Action, Preconditions (the room when the current text names one), Effects (the facts diff, in words),
        Check (``check`` indexes the shared self-check pool; None drops the line) [R]."""
        p = self.parse(obs)
        where = f"in the {p.fields['room']}" if p is not None and p.fields["room"] else "where the last turn left off"
        lines = [f"Action: {action}.", f"Preconditions: {where}.",
                 "Effects: " + ("; ".join(diff) if diff else "no state change") + "."]
        if check is not None:
            lines.append(CHECKS[check % len(CHECKS)])
        return "\n".join(lines)

    # ---- simulator hooks -------------------------------------------------------------------------------------------
    def outcome_from_observation(self, obs: str, action: str) -> tuple[float, bool]:
        """Reward from the score line ("gone up by one point"), termination on the end or lost banner [R]."""
        m = SCORE_UP.search(obs)
        words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
        r = float(words.get(m.group(1), int(m.group(1)) if m.group(1).isdigit() else 1)) if m else 0.0
        return r, END_LINE in obs or LOST_LINE in obs

    def admissible_from_text(self, obs: str, card: str | None) -> list[str]:
        """``look``, ``inventory`` and ``go <d>`` for each exit the (simulated) room text names, sorted."""
        p = self.parse(obs)
        out = {"look", "inventory"}
        if p is not None:
            out |= {f"go {d}" for d in p.fields["exits"]}
        return sorted(out)


def facts_diff(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The privileged state change in words: ``now at(player, studio)``, ``no longer at(player, workshop)``."""
    b, a = set(before), set(after)
    return [f"now {f}" for f in sorted(a - b)] + [f"no longer {f}" for f in sorted(b - a)]


# ---------------------------------------------------------------------------------------------------------------
# collection and cache

def _textworld():
    try:
        import textworld
        import textworld.gym
    except ImportError as exc:
        raise ImportError("TextWorld transitions need the textworld package: pip install 'agentmill[textworld]'"
                          ) from exc
    return textworld


def game_seed(game: str | Path) -> int:
    """The tw-make seed in a game file's name (``tw_1003.z8`` → 1003)."""
    m = re.match(r"tw_(\d+)$", Path(game).stem)
    if not m:
        raise ValueError(f"not a make_games file name: {game}")
    return int(m.group(1))


def collect_textworld(games: Sequence[tuple[str | Path, str]], episodes: int, *, max_steps: int = 20,
                      seed: int = 0) -> TransitionTable:
    """Transitions of ``episodes`` behaviour episodes per (game file, split) pair (module docstring)."""
    from agentmill.envs.textworld_env import clean_observation, game_command

    tw = _textworld()
    dom = TextWorldDomain()
    infos = tw.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True, score=True,
                        objective=True, facts=True)
    rows: list[Transition] = []
    for game, split in games:
        gid = Path(game).stem
        env_id = tw.gym.register_game(str(game), request_infos=infos, max_episode_steps=10**9, asynchronous=False)
        env = tw.gym.make(env_id)
        try:
            for e in range(episodes):
                rng = np.random.default_rng(derive_seed(seed, "wm-textworld", gid, e))
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=r".*is not fully supported")
                    raw, info = env.reset()
                goal = str(info.get("objective") or "")
                obs = clean_observation(raw, goal)
                facts = [fact_text(p) for p in info["facts"]]
                card = dom.card(facts)
                score = float(info.get("score") or 0)
                for t in range(max_steps):
                    adm = sorted({" ".join(c.lower().split()) for c in info.get("admissible_commands") or ()})
                    plan = list(info.get("policy_commands") or [])
                    u = rng.random()
                    if u < 0.1 or not adm:
                        a = INVALID_STRINGS[int(rng.integers(len(INVALID_STRINGS)))]
                    elif u < 0.6 and plan:
                        a = " ".join(plan[0].lower().split())
                    else:
                        a = adm[int(rng.integers(len(adm)))]
                    with warnings.catch_warnings():
                        warnings.filterwarnings("ignore", message=r".*was truncated to")
                        raw, new_score, done, info = env.step(game_command(a))
                    nobs = clean_observation(raw)
                    new_facts = [fact_text(p) for p in info["facts"]]
                    diff = facts_diff(facts, new_facts)
                    terminated = bool(info.get("won") or info.get("lost"))
                    rows.append(Transition("textworld", gid, split, f"{gid}/e{e}", t, goal, obs, a, nobs,
                                           float(new_score) - score, terminated, not terminated and t + 1 >= max_steps,
                                           bool(diff), a not in adm, tuple(diff), card, game_seed(game)))
                    obs, facts, score = nobs, new_facts, float(new_score)
                    if terminated or done:
                        break
        finally:
            env.close()
    return TransitionTable(rows)


def textworld_games(n: int, seed0: int = 1000) -> list[Path]:
    """``n`` games ``tw_<seed0>…`` (tw-make custom, world size 3, 6 objects, quest length 3, uncalibrated: the
    arguments of E165's games, so their tw-make cache entries are shared), copied under the world-model cache."""
    out = cache_root() / "world_model" / "textworld-games"
    paths = [out / f"tw_{seed0 + i}.z8" for i in range(n)]
    if all(p.is_file() and p.with_suffix(".json").is_file() for p in paths):
        return paths  # written only by this function, with these arguments (make_games copies the .z8 last)
    from agentmill.envs.textworld_env import make_games

    return make_games(out, n, seed0=seed0, calibrate=None)


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def textworld_table(games: Sequence[tuple[str | Path, str]], episodes: int, *, max_steps: int = 20,
                    seed: int = 0) -> TransitionTable:
    """:func:`collect_textworld`, cached by (version, game file hashes and splits, episodes, max_steps, seed)."""
    blob = json.dumps([TEXTWORLD_VERSION, [(_sha(Path(g)), s) for g, s in games], episodes, max_steps, seed])
    key = hashlib.sha256(blob.encode()).hexdigest()[:12]
    path = cache_root() / "world_model" / f"textworld-v{TEXTWORLD_VERSION}" / key / "transitions.jsonl"
    if path.exists():
        return TransitionTable.from_jsonl(path)
    table = collect_textworld(games, episodes, max_steps=max_steps, seed=seed)
    table.to_jsonl(path)
    return table
