"""Transition data: collection from KeyDoor, task splits, JSONL io, SFT examples and CPT documents.

A transition is (task, o_t, a_t, o_{t+1}) with privileged labels taken from the true state, never from text:
``changed`` (the true state moved) and ``diff`` (the changes in words, used only to write reasoning targets).
Splits are per task (layout), never per row. The behaviour policy mixes uniform random commands (40 %), an
ε-oracle walker (ε = 0.3, 50 %) and deliberate invalid strings (10 %) so that no-ops and errors are covered [R].
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, generate_layout
from agentmill.methods.world_model.domain import KeyDoorDomain, keydoor_diff
from agentmill.methods.world_model.format import QwenFormat, Turn, action_json, render_chatml

SPLITS = ("train", "cpt", "dev", "test")
INVALID_STRINGS = ("dance", "go up", "eat the door", "open window", "climb", "take sword", "jump")

WM_WORLD = KeyDoorConfig(n_rooms=3, n_locks=1, n_distractors=1, trap=False, droppable=False, max_steps=10,
                         n_loops=1)
"""The KeyDoor world of every e167 experiment [R]: 3 rooms, 1 lock, 1 distractor, no trap, no dropping, so the
(description, inventory) text is a bijection with the true state (the Markov-observable setting D-1 needs)."""


@dataclass(frozen=True)
class Transition:
    """One row of a transition table."""

    env: str
    task_id: str
    split: str
    episode_id: str
    t: int
    goal: str
    obs: str
    action: str
    next_obs: str
    reward: float
    terminated: bool
    truncated: bool
    changed: bool
    invalid: bool
    diff: tuple[str, ...]
    card: str | None
    layout_seed: int

    def turn(self) -> Turn:
        return Turn(self.obs, action_json(self.action), self.next_obs, self.t)


@dataclass
class TransitionTable:
    """Rows sorted by (task, episode, t); ``split_of`` maps task → split."""

    rows: list[Transition] = field(default_factory=list)

    def __post_init__(self) -> None:
        split_of: dict[str, str] = {}
        for i, r in enumerate(self.rows):
            if r.split not in SPLITS:
                raise ValueError(f"row {i} ({r.task_id}): unknown split {r.split!r}")
            if split_of.setdefault(r.task_id, r.split) != r.split:
                raise ValueError(f"row {i}: task {r.task_id} is in split {r.split!r} and {split_of[r.task_id]!r}")

    def split(self, name: str) -> list[Transition]:
        return [r for r in self.rows if r.split == name]

    def episodes(self, name: str | None = None) -> list[list[Transition]]:
        out: dict[str, list[Transition]] = {}
        for r in self.rows:
            if name is None or r.split == name:
                out.setdefault(r.episode_id, []).append(r)
        return list(out.values())

    def to_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (temp file, fsync, rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in self.rows:
                fh.write(json.dumps({"schema": "agentmill.wm-transition/1", **asdict(r)}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str]) -> TransitionTable:
        rows = []
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            d = json.loads(line)
            if d.pop("schema", None) != "agentmill.wm-transition/1":
                raise ValueError(f"{path}:{n}: not an agentmill.wm-transition/1 row")
            d["diff"] = tuple(d["diff"])
            rows.append(Transition(**d))
        return cls(rows)


def assign_splits(n_train: int, n_cpt: int, n_dev: int, n_test: int, seed: int) -> list[tuple[int, str]]:
    """(layout seed, split) for every task: consecutive layout seeds from a base derived from ``seed``."""
    base = derive_seed(seed, "wm-layouts") % 1_000_000
    out, s = [], base
    for name, n in (("train", n_train), ("cpt", n_cpt), ("dev", n_dev), ("test", n_test)):
        for _ in range(n):
            out.append((s, name))
            s += 1
    return out


def _behaviour(env: KeyDoorEnv, rng: np.random.Generator, mode: str) -> str:
    adm = env.admissible_commands(env.state)
    if mode == "oracle" and rng.random() > 0.3:
        plan = env.plan_commands(env.state)
        if plan:
            return plan[int(rng.integers(len(plan)))]
    if rng.random() < 0.1:
        return INVALID_STRINGS[int(rng.integers(len(INVALID_STRINGS)))]
    return adm[int(rng.integers(len(adm)))]


def collect_keydoor(tasks: Sequence[tuple[int, str]], episodes_per_task: int, *, seed: int = 0,
                    config: KeyDoorConfig = WM_WORLD, domain: KeyDoorDomain | None = None) -> TransitionTable:
    """Play ``episodes_per_task`` episodes of each (layout seed, split) task with the mixed behaviour policy."""
    domain = domain or KeyDoorDomain()
    rows: list[Transition] = []
    for k, (lseed, split) in enumerate(tasks):
        lay = generate_layout(lseed, config)
        env = KeyDoorEnv(lay, config)
        card = domain.card(lay)
        for e in range(episodes_per_task):
            rng = np.random.default_rng(derive_seed(seed, "wm-collect", lseed, e))
            mode = "oracle" if rng.random() < 0.55 else "random"
            obs, info = env.reset(seed=derive_seed(seed, "wm-env", lseed, e))
            done, t = False, 0
            while not done:
                a = _behaviour(env, rng, mode)
                before = env.state
                nobs, r, term, trunc, ninfo = env.step(a)
                after = env.state
                diff = tuple(keydoor_diff(env, before, after))
                rows.append(Transition("keydoor", lay.task_id, split, f"{lay.task_id}/e{e}", t, lay.objective, obs,
                                       a, nobs, float(r), bool(term), bool(trunc), before != after,
                                       bool(ninfo["invalid_action"]), diff, card, lseed))
                obs, t, done = nobs, t + 1, term or trunc
        env.close()
    return TransitionTable(rows)


# ---------------------------------------------------------------------------------------------------------------
# examples

@dataclass(frozen=True)
class WMExample:
    """A rendered prompt (ChatML text), its target, and bookkeeping."""

    prompt: str
    target: str
    task_id: str
    t: int
    changed: bool
    invalid: bool
    obs: str
    next_obs: str
    card: str | None
    action: str


def history_of(x: Transition, episode: Sequence[Transition]) -> list[Turn]:
    return [r.turn() for r in episode if r.t < x.t]


def build_examples(table_rows: Sequence[Transition], fmt: QwenFormat, domain: KeyDoorDomain, *,
                   reasoning: str = "template", self_check: bool = True, shuffle_targets: bool = False,
                   seed: int = 0, episodes: dict[str, list[Transition]] | None = None) -> list[WMExample]:
    """One example per transition, deduplicated on (prompt, target). ``reasoning``: ``template`` or ``none``.
    ``shuffle_targets`` permutes next observations among transitions with the same action verb (the W-1 negative
    control)."""
    if reasoning not in ("template", "none"):
        raise ValueError(f"reasoning must be 'template' or 'none', got {reasoning!r}")
    if episodes is None:
        episodes = {}
        for r in table_rows:
            episodes.setdefault(r.episode_id, []).append(r)
    nexts = [r.next_obs for r in table_rows]
    if shuffle_targets:
        rng = np.random.default_rng(derive_seed(seed, "wm-shuffle"))
        by_verb: dict[str, list[int]] = {}
        for i, r in enumerate(table_rows):
            by_verb.setdefault(r.action.split(" ")[0], []).append(i)
        for idx in by_verb.values():
            perm = rng.permutation(idx)
            for i, j in zip(idx, perm):
                nexts[i] = table_rows[int(j)].next_obs
    out, seen = [], set()
    for x, nxt in zip(table_rows, nexts):
        msgs = fmt.messages(history_of(x, episodes[x.episode_id]), x.turn(), goal=x.goal, card=x.card)
        prompt = render_chatml(msgs)
        check = None
        if self_check:
            check = int(hashlib.sha256(f"{x.episode_id}/{x.t}".encode()).hexdigest(), 16) % 8
        reason = domain.reasoning(x.action, x.obs, nxt, x.diff, check) if reasoning == "template" else None
        target = fmt.target(nxt, reason)
        if (prompt, target) in seen:
            continue
        seen.add((prompt, target))
        out.append(WMExample(prompt, target, x.task_id, x.t, x.changed, x.invalid, x.obs, nxt, x.card, x.action))
    return out


def cpt_documents(table_rows: Sequence[Transition], fmt: QwenFormat, manual: str | None = None) -> list[str]:
    """Whole episodes in the history layout, plus a project-written manual text (the stand-in for the paper's
    professional corpora [R])."""
    eps: dict[str, list[Transition]] = {}
    for r in table_rows:
        eps.setdefault(r.episode_id, []).append(r)
    docs = []
    for ep in eps.values():
        card = ep[0].card
        docs.append(f"**World Card:**\n{card}\n\n" + fmt.cpt_document(ep[0].goal, [r.turn() for r in ep]))
    if manual:
        docs.append(manual)
    return docs


KEYDOOR_MANUAL = """KeyDoor manual. Commands: go <direction> moves through an open exit; take <item> picks up an
item in the room; unlock <direction> door with <colour> key opens a locked door when the colours match (the key stays
in the lock); open chest wins when the chest is in the room; look, wait, inventory and examine change nothing. Any
other command gives: That is not a valid command. An observation lists the room (-= Room =-), what you see, the
chest, the exits (a locked door shows its colour) and what you are carrying."""


def memorised_share(train: Iterable[WMExample], test: Iterable[WMExample]) -> float:
    """Share of test examples whose exact (prompt, target) pair occurs in train."""
    seen = {(e.prompt, e.target) for e in train}
    test = list(test)
    return sum((e.prompt, e.target) in seen for e in test) / max(1, len(test))
