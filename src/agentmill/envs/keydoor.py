"""KeyDoor: a fast, branching text world with repeated states and an exact tabular model (E165/E173;
docs/methods/g2po.md).

Why it exists: G2PO (E165) only differs from GRPO when observations repeat across a group's rollouts, and its
claims are judged against exact values and oracle distances. TextWorld repeats states too but runs ~100 steps/s
and has no exportable model; KeyDoor runs at thousands of steps/s and exports its whole MDP (:meth:`to_tabular`)
for the exact solvers of ``core.tabular_mdp``.

The world **[R]** (the ingredients were planned up front, the details here are this project's choices):

- Rooms sit on grid cells; a random spanning tree of grid-adjacent cells plus ``n_loops`` extra edges (loops, so
  the same room is reached along different paths) gives the exits ``north/south/east/west``.
- ``n_locks`` edges carry a locked door of a colour; the key of that colour lies in some room. Unlocking leaves
  the key in its lock, and the inventory line lists keys left in locks, so which doors are open is observable
  wherever the agent stands (with ``droppable=False`` and no trap, (description, inventory) then identifies the
  true state: the fully observable setting of experiment G-1).
- The goal is "open the chest in the <room>". Generation resamples until the task is solvable (BFS over the key
  states) and, when there are locks, the chest room cannot be reached with every door still locked.
- ``n_distractors`` takeable objects (a lamp, a book, ...) only add irrelevant actions.
- With ``trap``, a well stands in one room: ``throw <colour> key into the well`` destroys a carried key. If that
  key was still needed the task becomes unsolvable while the episode continues: a crisp decisive error.
- With ``slip > 0`` each ``go`` ends in a random other open exit with probability ``slip``.

Reward: +1 for opening the chest (terminates, ``won``), ``-invalid_penalty`` for a string that is not an admissible
command (state unchanged), ``-step_penalty`` on every step. The episode is truncated after ``max_steps`` steps.

The observation is an optional feedback line, then the room description, then the inventory. ``info`` carries
``description`` and ``inventory`` without the feedback, so ``FieldsKey(("description", "inventory"))`` merges the
same state reached by different actions while an exact key on the observation does not (as in TextWorld).
``info["oracle"]`` carries the shortest number of steps to win (ignoring slips), the state id, a dead-end flag and
``plan_commands``, the admissible commands that start a shortest plan (used by ``EpsilonOraclePolicy``).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

import numpy as np

from agentmill.core.types import DEAD_END_DISTANCE

DIRECTIONS: dict[str, tuple[int, int]] = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
ROOM_NAMES = ("kitchen", "pantry", "cellar", "attic", "library", "study", "hallway", "garden", "bedroom",
              "bathroom", "workshop", "garage", "chapel", "gallery", "vault", "office", "nursery", "foyer",
              "parlour", "scullery")
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_NAMES = ("lamp", "book", "apple", "candle", "shoe", "coin", "map", "cup", "rope", "bell")

INVALID_FEEDBACK = "That is not a valid command."

# Positions of a key or object in the state tuple: a room index >= 0, or one of these.
CARRIED, GONE, USED = -1, -2, -3


@dataclass(frozen=True)
class KeyDoorConfig:
    """Size, dynamics and reward of a KeyDoor world (defaults are [R] unless marked)."""

    n_rooms: int = 6
    """Number of rooms (2..20)."""
    n_locks: int = 2
    """Locked doors, each with its own coloured key (0..8, fewer than ``n_rooms``)."""
    n_distractors: int = 2
    """Takeable objects that never matter (0..10); they add irrelevant actions and inventory variation."""
    trap: bool = True
    """Put a well in one room; throwing a still-needed key into it makes the task unsolvable."""
    slip: float = 0.0
    """Probability that a ``go`` ends in a random other open exit (0 = deterministic), in [0, 1)."""
    max_steps: int = 30
    """Steps before the episode is truncated."""
    include_feedback: bool = True
    """Prefix the observation with a feedback line ("You go north."), which ``info['description']`` omits."""
    invalid_penalty: float = 0.1
    """Reward subtracted for a non-admissible string: GiGPO's ``invalid_action_penalty_coef`` (verl-agent launch
    scripts [C])."""
    step_penalty: float = 0.0
    """Reward subtracted on every step."""
    droppable: bool = True
    """Offer ``drop <obj>``. With ``False`` (and ``trap=False``) every object is either where it started or
    carried, so (description, inventory) is a bijection with the true state: the fully observable setting of
    experiment G-1. [R] (G-1's "no droppable items")."""
    n_loops: int = 2
    """Extra grid edges beyond the spanning tree (when the grid has room for them). [R]: loops create repeated
    states reached along different paths, which is what G2PO merges."""

    def __post_init__(self) -> None:
        checks = (("n_rooms", 2, 20), ("n_locks", 0, 8), ("n_distractors", 0, len(DISTRACTOR_NAMES)),
                  ("max_steps", 1, 100_000), ("n_loops", 0, 100))
        for name, lo, hi in checks:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise ValueError(f"KeyDoorConfig.{name} must be an integer in [{lo}, {hi}], got {v!r}")
        if self.n_locks >= self.n_rooms:
            raise ValueError(f"KeyDoorConfig.n_locks ({self.n_locks}) must be < n_rooms ({self.n_rooms})")
        if not 0.0 <= self.slip < 1.0:
            raise ValueError(f"KeyDoorConfig.slip must be in [0, 1), got {self.slip}")
        if self.invalid_penalty < 0 or self.step_penalty < 0:
            raise ValueError("KeyDoorConfig penalties must be >= 0")


@dataclass(frozen=True)
class KeyDoorLayout:
    """One generated world (a task). Frozen and hashable, so per-layout tables are cached on it."""

    seed: int
    """The generation seed."""
    rooms: tuple[str, ...]
    """Room names; rooms are referred to by index."""
    exits: tuple[tuple[tuple[str, int], ...], ...]
    """Per room, the sorted (direction, destination room) pairs."""
    doors: tuple[tuple[int, str, int], ...]
    """Lock i sits on the edge (room, direction, room); it is opened by key i."""
    colours: tuple[str, ...]
    """Colour of lock/key i."""
    key_rooms: tuple[int, ...]
    """Initial room of key i."""
    distractors: tuple[str, ...]
    """Distractor object names."""
    distractor_rooms: tuple[int, ...]
    """Initial room of each distractor."""
    chest_room: int
    """The room holding the chest (the goal)."""
    well_room: int
    """The room with the well, or -1 without a trap."""
    start_room: int
    """Where every episode starts."""
    task_id: str
    """A stable name, e.g. ``keydoor-r6l2d2t-17``."""

    @property
    def objective(self) -> str:
        return f"Open the chest in the {self.rooms[self.chest_room]}."


# ---------------------------------------------------------------------------------------------------------------
# layout generation


def _task_id(cfg: KeyDoorConfig, seed: int) -> str:
    return (f"keydoor-r{cfg.n_rooms}l{cfg.n_locks}d{cfg.n_distractors}{'t' if cfg.trap else ''}"
            f"{'' if cfg.n_loops == 2 else f'o{cfg.n_loops}'}-{seed}")


def _draw_layout(cfg: KeyDoorConfig, seed: int, rng: random.Random) -> KeyDoorLayout:
    cells = [(0, 0)]
    edges: list[tuple[int, int, str]] = []  # (room_a, room_b, direction a->b)
    opposite = {"north": "south", "south": "north", "east": "west", "west": "east"}
    dirs = sorted(DIRECTIONS)
    while len(cells) < cfg.n_rooms:
        a = rng.randrange(len(cells))
        d = rng.choice(dirs)
        dx, dy = DIRECTIONS[d]
        c = (cells[a][0] + dx, cells[a][1] + dy)
        if c not in cells:
            cells.append(c)
            edges.append((a, len(cells) - 1, d))
    tree = {frozenset((a, b)) for a, b, _ in edges}
    extra = []
    for a, ca in enumerate(cells):
        for d in dirs:
            dx, dy = DIRECTIONS[d]
            c = (ca[0] + dx, ca[1] + dy)
            if c in cells:
                b = cells.index(c)
                if a < b and frozenset((a, b)) not in tree:
                    extra.append((a, b, d))
    edges += rng.sample(extra, min(cfg.n_loops, len(extra)))
    n = cfg.n_rooms
    exits: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    for a, b, d in edges:
        exits[a].append((d, b))
        exits[b].append((opposite[d], a))
    locked = rng.sample(range(len(edges)), cfg.n_locks)
    doors = tuple((edges[i][0], edges[i][2], edges[i][1]) for i in locked)
    names = rng.sample(ROOM_NAMES, n)
    return KeyDoorLayout(
        seed=seed, rooms=tuple(names), exits=tuple(tuple(sorted(e)) for e in exits), doors=doors,
        colours=tuple(rng.sample(COLOURS, cfg.n_locks)),
        key_rooms=tuple(rng.randrange(n) for _ in range(cfg.n_locks)),
        distractors=tuple(rng.sample(DISTRACTOR_NAMES, cfg.n_distractors)),
        distractor_rooms=tuple(rng.randrange(n) for _ in range(cfg.n_distractors)),
        chest_room=-1, well_room=rng.randrange(n) if cfg.trap else -1, start_room=rng.randrange(n),
        task_id=_task_id(cfg, seed))


def generate_layout(seed: int, config: KeyDoorConfig = KeyDoorConfig(), *, max_tries: int = 10_000
                    ) -> KeyDoorLayout:
    """The layout for ``seed``: draw until the task is solvable and (with locks) needs a key.

    Deterministic in (seed, the config's layout fields), on every platform (``random.Random``).
    """
    rng = random.Random(seed)
    for _ in range(max_tries):
        lay = _draw_layout(config, seed, rng)
        others = [r for r in range(config.n_rooms) if r != lay.start_room]
        lay = replace(lay, chest_room=rng.choice(others))
        if config.n_locks and lay.chest_room in _open_component(lay, lay.start_room):
            continue
        model = _core_model(lay, config.droppable, config.trap)
        if model.distance[model.start] < DEAD_END_DISTANCE:
            return lay
    raise RuntimeError(f"no solvable KeyDoor layout for seed {seed} in {max_tries} draws ({config})")


def _open_component(lay: KeyDoorLayout, start: int) -> set[int]:
    """Rooms reachable from ``start`` with every door locked."""
    blocked = {(a, d) for a, d, _ in lay.doors} | {(b, _opp(d)) for _, d, b in lay.doors}
    seen, todo = {start}, [start]
    while todo:
        r = todo.pop()
        for d, b in lay.exits[r]:
            if (r, d) not in blocked and b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def _opp(d: str) -> str:
    return {"north": "south", "south": "north", "east": "west", "west": "east"}[d]


# ---------------------------------------------------------------------------------------------------------------
# the oracle: shortest distance to winning over "core" states (room, key positions). Distractors never matter,
# so they are left out, which keeps the BFS small (6 rooms, 2 keys: at most 6·9² states).


@dataclass(frozen=True)
class _CoreModel:
    start: tuple
    distance: dict
    """core state -> steps to win (DEAD_END_DISTANCE if impossible); the won state is the string "won"."""


def _door_lookup(lay: KeyDoorLayout) -> dict[tuple[int, str], int]:
    out = {}
    for i, (a, d, b) in enumerate(lay.doors):
        out[(a, d)] = i
        out[(b, _opp(d))] = i
    return out


def _core_successors(lay: KeyDoorLayout, state: tuple, droppable: bool, trap: bool, doors: dict) -> list:
    room, keys = state
    out = []
    for d, b in lay.exits[room]:
        i = doors.get((room, d))
        if i is None or keys[i] == USED:
            out.append((b, keys))
    for i, pos in enumerate(keys):
        if pos == room:
            out.append((room, keys[:i] + (CARRIED,) + keys[i + 1:]))
        elif pos == CARRIED:
            if droppable:
                out.append((room, keys[:i] + (room,) + keys[i + 1:]))
            if trap and room == lay.well_room:
                out.append((room, keys[:i] + (GONE,) + keys[i + 1:]))
            for d, _ in lay.exits[room]:
                if doors.get((room, d)) == i:
                    out.append((room, keys[:i] + (USED,) + keys[i + 1:]))
    if room == lay.chest_room:
        out.append("won")
    return out


@lru_cache(maxsize=256)
def _core_model(lay: KeyDoorLayout, droppable: bool, trap: bool) -> _CoreModel:
    doors = _door_lookup(lay)
    start = (lay.start_room, tuple(lay.key_rooms))
    succ: dict[Any, list] = {}
    todo = deque([start])
    succ[start] = []
    while todo:
        s = todo.popleft()
        if s == "won":
            continue
        nxt = _core_successors(lay, s, droppable, trap, doors)
        succ[s] = nxt
        for t in nxt:
            if t not in succ:
                succ[t] = []
                todo.append(t)
    pred: dict[Any, list] = {s: [] for s in succ}
    for s, nxt in succ.items():
        for t in nxt:
            pred[t].append(s)
    dist = {s: DEAD_END_DISTANCE for s in succ}
    if "won" in dist:
        dist["won"] = 0
        todo = deque(["won"])
        while todo:
            t = todo.popleft()
            for s in pred[t]:
                if dist[s] == DEAD_END_DISTANCE:
                    dist[s] = dist[t] + 1
                    todo.append(s)
    return _CoreModel(start=start, distance=dist)


# ---------------------------------------------------------------------------------------------------------------
# the environment

# A full state is (room, key positions, distractor positions, won).
State = tuple


def _a(name: str) -> str:
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _join(items: Sequence[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


@lru_cache(maxsize=256)
def _shared_tables(kind: type, layout: KeyDoorLayout, config: KeyDoorConfig) -> tuple[dict, ...]:
    """The per-state caches of one world, shared by every env of it.

    Collectors build a fresh env per group (hundreds per experiment over a handful of layouts), and each used to
    re-derive the same admissible sets, texts, plans and outcomes from scratch. Every entry is a pure function of
    (env class, layout, config, state), so sharing changes nothing but the time."""
    return {}, {}, {}, {}, {}, {}


class KeyDoorEnv:
    """One KeyDoor world (a fixed layout); see the module docstring. Implements :class:`~agentmill.envs.base.TextEnv`.

    ``reset(seed=...)`` seeds only the slip randomness: every episode of an env starts in the same state, which is
    what makes a group of rollouts "one task". Stepping after the episode ended raises ``RuntimeError``.
    """

    def __init__(self, layout: KeyDoorLayout | None = None, config: KeyDoorConfig = KeyDoorConfig(), *,
                 layout_seed: int = 0) -> None:
        self.config = config
        self.layout = layout if layout is not None else generate_layout(layout_seed, config)
        lay = self.layout
        if (len(lay.rooms) != config.n_rooms or len(lay.doors) != config.n_locks
                or len(lay.distractors) != config.n_distractors or (lay.well_room >= 0) != config.trap):
            raise ValueError(f"layout {lay.task_id} does not match the config ({config})")
        self._doors = _door_lookup(lay)
        self._core = _core_model(lay, config.droppable, config.trap)
        self._rng = random.Random(0)
        self._adm: dict[State, dict[str, tuple]]
        self._sorted_adm: dict[State, tuple[str, ...]]
        self._text: dict[State, tuple[str, str]]
        self._plan: dict[State, tuple[str, ...]]
        self._outs: dict[tuple[State, tuple], list[tuple[float, State, str, float]]]
        self._seen: dict[State, tuple]  # what _observe shows at a state, whatever the feedback
        (self._adm, self._sorted_adm, self._text, self._plan, self._outs,
         self._seen) = _shared_tables(type(self), lay, config)
        self._state: State | None = None
        self._t = 0
        self._done = True
        self.start_state: State = (lay.start_room, tuple(lay.key_rooms), tuple(lay.distractor_rooms), False)

    def __repr__(self) -> str:
        return f"KeyDoorEnv({self.layout.task_id})"

    # ---- TextEnv -------------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        if seed is not None:
            self._rng = random.Random(seed)
        self._state = self.start_state
        self._t = 0
        self._done = False
        feedback = f"Your task: {self.layout.objective[0].lower()}{self.layout.objective[1:]}"
        return self._observe(feedback, invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        feedback, reward, invalid, terminated, truncated = self._advance(action)
        obs, info = self._observe(feedback, invalid)
        return obs, float(reward), terminated, truncated, info

    def _advance(self, action: str) -> tuple[str, float, bool, bool, bool]:
        """The dynamics of :meth:`step` without the observation: (feedback, reward, invalid, terminated,
        truncated). :func:`random_success_rate` plays thousands of episodes whose observations nobody reads."""
        if self._done or self._state is None:
            raise RuntimeError("KeyDoorEnv.step called on a finished episode; call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"action must be str, got {type(action).__name__}")
        cfg = self.config
        self._t += 1
        cmd = " ".join(action.lower().split())
        act = self._admissible(self._state).get(cmd)
        reward = -cfg.step_penalty
        if act is None:
            feedback, invalid = INVALID_FEEDBACK, True
            reward -= cfg.invalid_penalty
        else:
            outcomes = self._outcomes(self._state, act)
            k = 0
            if len(outcomes) > 1:
                u, acc = self._rng.random(), 0.0
                for k, (p, *_rest) in enumerate(outcomes):
                    acc += p
                    if u < acc:
                        break
            _, self._state, feedback, r = outcomes[k]
            reward += r
            invalid = False
        terminated = bool(self._state[3])
        truncated = not terminated and self._t >= cfg.max_steps
        self._done = terminated or truncated
        return feedback, reward, invalid, terminated, truncated

    def close(self) -> None:
        self._state = None
        self._done = True

    # ---- state, text and oracle ------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        """The current full state (room, key positions, distractor positions, won); for tests and tools."""
        if self._state is None:
            raise RuntimeError("no current state; call reset()")
        return self._state

    @staticmethod
    def state_id(state: State) -> str:
        room, keys, objs, won = state
        return f"r{room}|k{','.join(map(str, keys))}|o{','.join(map(str, objs))}|{'won' if won else 'live'}"

    def distance(self, state: State) -> int:
        """Shortest number of steps to win from ``state`` without slips; ``DEAD_END_DISTANCE`` if impossible."""
        if state[3]:
            return 0
        return self._core.distance[(state[0], state[1])]

    def admissible_commands(self, state: State) -> tuple[str, ...]:
        """The sorted admissible commands at ``state``."""
        if state not in self._sorted_adm:
            self._sorted_adm[state] = tuple(sorted(self._admissible(state)))
        return self._sorted_adm[state]

    def texts(self, state: State) -> tuple[str, str]:
        """(description, inventory) of ``state``: what ``FieldsKey`` sees."""
        out = self._text.get(state)
        if out is None:
            out = self._text[state] = self._render(state)
        return out

    def _observe(self, feedback: str, invalid: bool) -> tuple[str, dict]:
        s = self._state
        seen = self._seen.get(s)  # type: ignore[arg-type]
        if seen is None:
            desc, inv = self.texts(s)
            dist = self.distance(s)
            seen = self._seen[s] = (desc, inv, () if s[3] else self.admissible_commands(s), bool(s[3]), dist,
                                    self.state_id(s), dist >= DEAD_END_DISTANCE, self.plan_commands(s))
        desc, inv, adm, won, dist, sid, dead, plan = seen
        obs = f"{feedback}\n{desc}\n{inv}" if self.config.include_feedback and feedback else f"{desc}\n{inv}"
        info = {"admissible_commands": list(adm),
                "won": won, "lost": False, "task_id": self.layout.task_id, "step": self._t,
                "invalid_action": invalid, "feedback": feedback, "description": desc, "inventory": inv,
                "objective": self.layout.objective,
                "oracle": {"distance_to_goal": dist, "state_id": sid,
                           "dead_end": dead, "plan_commands": list(plan)}}
        return obs, info

    def plan_commands(self, state: State) -> tuple[str, ...]:
        """The sorted admissible commands whose intended outcome (no slip) lowers the distance to win by one:
        the first moves of every shortest plan. Empty at the won state and in dead ends."""
        out = self._plan.get(state)
        if out is None:
            d = self.distance(state)
            out = () if state[3] or d >= DEAD_END_DISTANCE else tuple(
                cmd for cmd in self.admissible_commands(state)
                if self.distance(self._outcomes(state, self._admissible(state)[cmd])[0][1]) == d - 1)
            self._plan[state] = out
        return out

    def _render(self, s: State) -> tuple[str, str]:
        lay = self.layout
        room, keys, objs, won = s
        here = [f"{lay.colours[i]} key" for i, p in enumerate(keys) if p == room]
        here += [lay.distractors[j] for j, p in enumerate(objs) if p == room]
        lines = [f"-= {lay.rooms[room].title()} =-",
                 f"You see {_join([_a(x) for x in here])}." if here else "You see nothing special."]
        if room == lay.chest_room:
            lines.append("There is an open chest here." if won else "There is a closed chest here.")
        if room == lay.well_room:
            lines.append("There is a deep well here.")
        ex = []
        for d, _ in lay.exits[room]:
            i = self._doors.get((room, d))
            ex.append(f"{d} (a locked {lay.colours[i]} door)" if i is not None and keys[i] != USED else d)
        lines.append(f"Exits: {', '.join(ex)}.")
        carried = [f"{lay.colours[i]} key" for i, p in enumerate(keys) if p == CARRIED]
        carried += [lay.distractors[j] for j, p in enumerate(objs) if p == CARRIED]
        inv = f"You are carrying {_join([_a(x) for x in carried])}." if carried else "You are carrying nothing."
        used = [lay.colours[i] for i, p in enumerate(keys) if p == USED]
        if used:  # a used key stays in its lock; listing it keeps door states observable from anywhere [R]
            inv += f" Keys left in their locks: {', '.join(used)}."
        return "\n".join(lines), inv

    # ---- dynamics ------------------------------------------------------------------------------------------------
    def _admissible(self, s: State) -> dict[str, tuple]:
        """command -> action tuple at ``s`` (cached per state; the state space is small)."""
        cached = self._adm.get(s)
        if cached is not None:
            return cached
        lay, cfg = self.layout, self.config
        room, keys, objs, won = s
        out: dict[str, tuple] = {}
        if won:
            self._adm[s] = out
            return out
        out["look"] = ("look",)
        out["wait"] = ("wait",)
        out["inventory"] = ("inventory",)
        for d, b in lay.exits[room]:
            i = self._doors.get((room, d))
            if i is None or keys[i] == USED:
                out[f"go {d}"] = ("go", d)
        for i, p in enumerate(keys):
            name = f"{lay.colours[i]} key"
            if p == room:
                out[f"take {name}"] = ("take_key", i)
                out[f"examine {name}"] = ("examine", name)
            elif p == CARRIED:
                out[f"examine {name}"] = ("examine", name)
                if cfg.droppable:
                    out[f"drop {name}"] = ("drop_key", i)
                if cfg.trap and room == lay.well_room:
                    out[f"throw {name} into the well"] = ("throw", i)
                for d, _ in lay.exits[room]:
                    j = self._doors.get((room, d))
                    if j is not None and keys[j] != USED:
                        out[f"unlock {d} door with {name}"] = ("unlock", d, j, i)
        for j, p in enumerate(objs):
            name = lay.distractors[j]
            if p == room:
                out[f"take {name}"] = ("take_obj", j)
                out[f"examine {name}"] = ("examine", name)
            elif p == CARRIED:
                out[f"examine {name}"] = ("examine", name)
                if cfg.droppable:
                    out[f"drop {name}"] = ("drop_obj", j)
        if room == lay.chest_room:
            out["open chest"] = ("open",)
            out["examine chest"] = ("examine", "chest")
        if room == lay.well_room:
            out["examine well"] = ("examine", "well")
        self._adm[s] = out
        return out

    def _outcomes(self, s: State, act: tuple) -> list[tuple[float, State, str, float]]:
        """The (probability, next state, feedback, reward) outcomes of an admissible action at ``s`` (cached per
        world; read-only)."""
        out = self._outs.get((s, act))
        if out is None:
            out = self._outs[(s, act)] = self._outcomes_of(s, act)
        return out

    def _outcomes_of(self, s: State, act: tuple) -> list[tuple[float, State, str, float]]:
        lay = self.layout
        room, keys, objs, won = s
        kind = act[0]
        if kind == "go":
            dest = dict(lay.exits[room])[act[1]]
            out = [(1.0, (dest, keys, objs, won), f"You go {act[1]}.", 0.0)]
            if self.config.slip > 0:
                others = [(d, b) for d, b in lay.exits[room] if d != act[1]
                          and (self._doors.get((room, d)) is None or keys[self._doors[(room, d)]] == USED)]
                if others:
                    p = self.config.slip / len(others)
                    out = [(1.0 - self.config.slip, *out[0][1:])]
                    out += [(p, (b, keys, objs, won), f"You slip and stumble {d} instead.", 0.0) for d, b in others]
            return out
        if kind == "take_key":
            i = act[1]
            return [(1.0, (room, _set(keys, i, CARRIED), objs, won), f"You take the {lay.colours[i]} key.", 0.0)]
        if kind == "take_obj":
            j = act[1]
            return [(1.0, (room, keys, _set(objs, j, CARRIED), won), f"You take the {lay.distractors[j]}.", 0.0)]
        if kind == "drop_key":
            i = act[1]
            return [(1.0, (room, _set(keys, i, room), objs, won), f"You drop the {lay.colours[i]} key.", 0.0)]
        if kind == "drop_obj":
            j = act[1]
            return [(1.0, (room, keys, _set(objs, j, room), won), f"You drop the {lay.distractors[j]}.", 0.0)]
        if kind == "throw":
            i = act[1]
            return [(1.0, (room, _set(keys, i, GONE), objs, won),
                     f"The {lay.colours[i]} key falls into the well and is gone.", 0.0)]
        if kind == "unlock":
            _, d, door, key = act
            if door != key:
                return [(1.0, s, f"The {lay.colours[key]} key does not fit the {lay.colours[door]} lock.", 0.0)]
            return [(1.0, (room, _set(keys, key, USED), objs, won),
                     f"You unlock the {d} door with the {lay.colours[key]} key. The key stays in the lock.", 0.0)]
        if kind == "open":
            return [(1.0, (room, keys, objs, True), "You open the chest. *** You won! ***", 1.0)]
        if kind == "look":
            return [(1.0, s, "You look around.", 0.0)]
        if kind == "wait":
            return [(1.0, s, "Time passes.", 0.0)]
        if kind == "inventory":
            return [(1.0, s, "You check what you are carrying.", 0.0)]
        if kind == "examine":
            return [(1.0, s, f"You see nothing unusual about the {act[1]}.", 0.0)]
        raise AssertionError(f"unknown action kind {kind!r}")

    # ---- exact model -----------------------------------------------------------------------------------------------
    def reachable_states(self, max_states: int = 20_000) -> list[State]:
        """Every full state reachable from the start (BFS order, start first), including the won state."""
        order = [self.start_state]
        seen = {self.start_state}
        i = 0
        while i < len(order):
            s = order[i]
            i += 1
            for act in self._admissible(s).values():
                for _, t, _, _ in self._outcomes(s, act):
                    if t not in seen:
                        seen.add(t)
                        order.append(t)
                        if len(order) > max_states:
                            raise ValueError(f"{self.layout.task_id} has more than {max_states} reachable states; "
                                             "use a smaller config (fewer rooms, locks or distractors, or "
                                             "droppable=False) for an exact model")
        return order

    def to_tabular(self, gamma: float = 0.95, *, max_bytes: int = 2**28):
        """The exact MDP of this world: ``(TabularMDP, state_index, obs_of_state, admissible_of_state)``.

        - States: every full state reachable from the start (state 0 = the start); the won state is absorbing.
          Time is not part of the state: the model is the untruncated MDP (``max_steps`` is a property of episodes).
        - Actions: the sorted union of every state's admissible commands; ``valid`` masks them per state.
          Non-admissible strings (the invalid penalty) are not modelled.
        - ``R[s, a]`` is the expected reward after ``a`` (``+1`` for opening the chest, ``-step_penalty``).
        - ``state_index`` maps ``info["oracle"]["state_id"]`` to the row; ``obs_of_state`` is the observation
          without feedback (description and inventory); ``admissible_of_state`` the sorted commands.
        - The action names of the columns are stored on the env as :attr:`tabular_actions`.

        P is dense (S·A·S float64): ``ValueError`` when it would exceed ``max_bytes`` (256 MiB by default). The
        default config (6 rooms, 2 locks, 2 droppable distractors) has ~2,000 states and ~28 commands, too many;
        ``droppable=False`` or fewer rooms/distractors give models of tens to hundreds of states.
        """
        from agentmill.core.tabular_mdp import TabularMDP

        states = self.reachable_states(max_states=max(1, int((max_bytes / 8) ** 0.5)))
        index = {s: k for k, s in enumerate(states)}
        actions = sorted({c for s in states for c in self._admissible(s)})
        a_index = {c: k for k, c in enumerate(actions)}
        S, A = len(states), len(actions)
        if S * A * S * 8 > max_bytes:
            raise ValueError(f"the exact model of {self.layout.task_id} needs {S} states x {A} actions "
                             f"({S * A * S * 8 / 2**20:.0f} MiB dense P > max_bytes); use a smaller config "
                             "(fewer rooms, locks or distractors, or droppable=False)")
        P = np.zeros((S, A, S))
        R = np.zeros((S, A))
        valid = np.zeros((S, A), dtype=bool)
        absorbing = np.zeros(S, dtype=bool)
        for k, s in enumerate(states):
            if s[3]:
                absorbing[k] = True
                continue
            for cmd, act in self._admissible(s).items():
                a = a_index[cmd]
                valid[k, a] = True
                for p, t, _, r in self._outcomes(s, act):
                    P[k, a, index[t]] += p
                    R[k, a] += p * (r - self.config.step_penalty)
        start = np.zeros(S)
        start[0] = 1.0
        mdp = TabularMDP(P=P, R=R, gamma=gamma, valid=valid, absorbing=absorbing, start=start)
        self.tabular_actions: tuple[str, ...] = tuple(actions)
        state_index = {self.state_id(s): k for k, s in enumerate(states)}
        obs_of_state = ["\n".join(self.texts(s)) for s in states]
        admissible_of_state = [self.admissible_commands(s) for s in states]
        return mdp, state_index, obs_of_state, admissible_of_state


def _set(t: tuple, i: int, v: int) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def make_keydoor(*, layout: KeyDoorLayout | None = None, layout_seed: int = 0, config: KeyDoorConfig | None = None,
                 **config_fields: Any) -> KeyDoorEnv:
    """Registry factory for ``keydoor-v0``: ``make("keydoor-v0", layout_seed=3, slip=0.1)``.

    Keyword arguments that are :class:`KeyDoorConfig` fields override ``config`` (unknown ones raise).
    """
    names = {f.name for f in fields(KeyDoorConfig)}
    unknown = sorted(set(config_fields) - names)
    if unknown:
        raise TypeError(f"unknown KeyDoor options {unknown}; KeyDoorConfig fields are {sorted(names)}")
    cfg = replace(config or KeyDoorConfig(), **config_fields)
    return KeyDoorEnv(layout, cfg, layout_seed=layout_seed)


# ---------------------------------------------------------------------------------------------------------------
# calibrated task sets


def random_success_rate(layout: KeyDoorLayout, config: KeyDoorConfig = KeyDoorConfig(), episodes: int = 64,
                        seed: int = 0) -> float:
    """Success rate of the uniform policy over admissible commands within ``config.max_steps`` steps."""
    env = KeyDoorEnv(layout, config)
    rng = random.Random(seed)
    wins = 0
    for e in range(episodes):
        env.reset(seed=seed * 1_000_003 + e)
        done = False
        while not done:  # env.step without building observations nobody reads (same draws, same states)
            cmd = rng.choice(env.admissible_commands(env.state))
            _, _, _, term, trunc = env._advance(cmd)
            done = term or trunc
        wins += bool(env.state[3])
    return wins / episodes


def layouts(n: int, seed: int = 0, calibrate: tuple[float, float] | None = (0.05, 0.5),
            config: KeyDoorConfig = KeyDoorConfig(), *, episodes: int = 64,
            max_candidates: int | None = None) -> list[KeyDoorLayout]:
    """``n`` layouts from consecutive seeds ``seed, seed+1, ...``, keeping those whose random-policy success over
    ``episodes`` episodes lies in ``calibrate`` (inclusive), so that a learning signal exists [R].

    ``calibrate=None`` keeps every layout. Raises ``RuntimeError`` after ``max_candidates`` seeds (default 50·n).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if calibrate is not None and not 0 <= calibrate[0] <= calibrate[1] <= 1:
        raise ValueError(f"calibrate must be (lo, hi) with 0 <= lo <= hi <= 1, got {calibrate}")
    limit = max_candidates if max_candidates is not None else 50 * max(n, 1)
    out: list[KeyDoorLayout] = []
    s = seed
    while len(out) < n:
        if s - seed >= limit:
            raise RuntimeError(f"only {len(out)} of {n} KeyDoor layouts had random-policy success in {calibrate} "
                               f"among seeds {seed}..{s - 1} ({config}); widen the interval or change the config")
        lay = generate_layout(s, config)
        if calibrate is None or calibrate[0] <= random_success_rate(lay, config, episodes, seed=s) <= calibrate[1]:
            out.append(lay)
        s += 1
    return out


TINY_WORLD = KeyDoorConfig(n_rooms=3, n_locks=1, n_distractors=0, trap=True, droppable=False,
                           include_feedback=False, max_steps=20)
"""The tiny KeyDoor of the LM-pair experiments (E173 P-6, the E165 LoRA check): 3 rooms, 1 lock, a trap, ≤ 8
admissible commands per state; no feedback text, so the exact model's states are exactly what a policy sees."""
