"""Real TextWorld games behind the agentmill :class:`~agentmill.envs.base.TextEnv` protocol [R].

TextWorld (PyPI ``textworld`` 1.7.0, MIT; github.com/microsoft/TextWorld) is the text engine ALFWorld is built on,
and the closest offline stand-in for the papers' benchmarks: its states repeat by construction, it lists the
admissible commands, and it tracks a winning plan (``policy_commands``) that gives a distance-to-goal label.

- :func:`make_games` generates games with ``tw-make`` (offline, a few seconds each), caches them, and keeps the
  ones a random policy solves at a calibrated rate.
- :class:`TextWorldEnv` plays one game file with the Gymnasium 1.x five-tuple API.
- :class:`GamePool` is a set of game files with the ``task -> env`` factory ``collect_groups`` wants.

Facts about the engine this module relies on (observed on textworld 1.7.0): ``step`` returns the *cumulative* score, so
the reward is a difference; the first observation carries an ASCII-art banner, and every observation ends with a
prompt and a status line (room, score/moves) that would make every observation unique — both are stripped;
``policy_commands`` is a tracked winning plan shortened by removing sub-sequences, not guaranteed shortest, and
tracking stops after irreversible actions, so its length is an upper-bound distance and "unknown" where missing.

Game files are code for a native interpreter, so only games generated locally (into the cache) or passed
explicitly are loaded, and ``tw-make`` is always run with an argument list, never through a shell: game files count as
code [R].
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentmill.core.paths import cache_root
from agentmill.core.records import atomic_target, write_text_atomic

TW_MAKE_TIMEOUT_S = 120.0
"""Per-game generation timeout [R]."""

_INSTALL = "pip install textworld==1.7.0  (or: pip install 'agentmill[textworld]')"
_PROMPT_STATUS = re.compile(r"\n\s*>[^\n]*\Z")
_ART_LINE = re.compile(r"^[\s_|$\\/<>]*$")


def _textworld():
    try:
        import textworld
        import textworld.gym
    except ImportError as exc:
        raise ImportError(f"TextWorld games need the textworld package: {_INSTALL}") from exc
    return textworld


def clean_observation(text: str, objective: str | None = None) -> str:
    """Strip the opening banner, the trailing prompt and status line, and surrounding blank lines.

    The status line ("-= Kitchen =-0/3": room, score/moves) changes every move; leaving it in would make every
    observation unique and hide all repeated states from G2PO.
    """
    text = _PROMPT_STATUS.sub("", text.replace("\r", ""))
    if objective and objective in text:
        text = text[text.index(objective):]
    else:
        lines = text.split("\n")
        k = 0
        while k < len(lines) and _ART_LINE.match(lines[k]):
            k += 1
        text = "\n".join(lines[k:])
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def game_command(action: str) -> str:
    """The line actually typed into the interpreter for ``action``.

    - One line only: a newline inside the string would feed the interpreter several commands in one step.
    - No backslash: jericho's dumb-frotz reads ``\\x`` as an interpreter escape, and some escapes crash the
      process (a segfault in CI on a random gymnasium action, 2026-11-25). No game command contains one.
    - Printable ASCII only: the Z-machine's input alphabet; anything else becomes a space.
    """
    cleaned = "".join(c if " " <= c <= "~" and c != "\\" else " " for c in action)
    return " ".join(cleaned.split())


class TextWorldEnv:
    """One TextWorld game file as a :class:`~agentmill.envs.base.TextEnv` [R].

    - ``reward`` = score − previous score; ``terminated`` = won or lost; ``truncated`` = ``max_steps`` steps taken
      (every call counts, including commands the game does not understand) or no admissible command left
      (``info["stuck"] = True``).
    - Any string is passed to the game as :func:`game_command` makes it (one line of printable ASCII, no backslash);
      ``invalid_action`` is set when it was not admissible.
    - ``info``: ``admissible_commands`` (sorted), ``won``, ``lost``, ``task_id`` (the file stem), ``step``,
      ``invalid_action``, ``feedback`` (the cleaned game text, also the observation), ``description``,
      ``inventory``, ``objective``, ``score``, ``max_score``, and ``oracle``: ``distance_to_goal`` =
      len(policy_commands) (0 when won, ``None`` when the plan is unavailable or the game is lost),
      ``plan_commands`` (the plan's next command), ``dead_end`` (lost), ``state_id`` (``None``: not tracked).
    - ``reset(seed=...)`` is accepted for the protocol; generated games are deterministic.
    - One interpreter per instance; :meth:`close` releases it.
    """

    def __init__(self, game_file: str | os.PathLike, max_steps: int = 40) -> None:
        path = Path(game_file)
        if not path.is_file():
            raise FileNotFoundError(f"TextWorld game file not found: {path}")
        if not path.with_suffix(".json").is_file():
            raise ValueError(f"TextWorld game {path} has no {path.with_suffix('.json').name} metadata next to it; "
                             "admissible commands and the winning plan need it (regenerate with make_games)")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
        tw = _textworld()
        self.game_file = path
        self.max_steps = max_steps
        self.task_id = path.stem
        infos = tw.EnvInfos(description=True, inventory=True, admissible_commands=True, policy_commands=True,
                            won=True, lost=True, score=True, max_score=True, objective=True, moves=True)
        # The episode limit is enforced here (every call counts); TextWorld's own counter skips unparsed commands.
        env_id = tw.gym.register_game(str(path), request_infos=infos, max_episode_steps=10**9,
                                      asynchronous=False)
        self._env = tw.gym.make(env_id)
        self._score = 0.0
        self._t = 0
        self._done = True
        self._admissible: list[str] = []
        self._objective = ""

    def __repr__(self) -> str:
        return f"TextWorldEnv({str(self.game_file)!r}, max_steps={self.max_steps})"

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        if self._env is None:
            raise RuntimeError("TextWorldEnv is closed")
        with warnings.catch_warnings():
            # jericho does not know TextWorld's generated games and says so on every load; TextWorld tracks score,
            # moves and the plan itself, so nothing this module reads is affected.
            warnings.filterwarnings("ignore", message=r".*is not fully supported")
            raw, tw_info = self._env.reset()
        self._objective = str(tw_info.get("objective") or "")
        self._score = float(tw_info.get("score") or 0)
        self._t = 0
        self._done = False
        obs = clean_observation(raw, self._objective)
        return obs, self._info(tw_info, obs, invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done or self._env is None:
            raise RuntimeError("TextWorldEnv.step called on a finished episode; call reset() first")
        if not isinstance(action, str):
            raise TypeError(f"action must be str, got {type(action).__name__}")
        command = game_command(action)
        invalid = command.lower() not in self._admissible
        with warnings.catch_warnings():
            # jericho cuts commands longer than its input buffer and warns; such a string is invalid anyway.
            warnings.filterwarnings("ignore", message=r".*was truncated to")
            raw, score, done, tw_info = self._env.step(command)
        self._t += 1
        reward = float(score) - self._score
        self._score = float(score)
        obs = clean_observation(raw)
        info = self._info(tw_info, obs, invalid)
        terminated = bool(info["won"] or info["lost"])
        truncated = not terminated and (bool(done) or self._t >= self.max_steps or info.get("stuck", False))
        self._done = terminated or truncated
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._done = True

    def _info(self, tw: dict, feedback: str, invalid: bool) -> dict[str, Any]:
        won, lost = bool(tw.get("won")), bool(tw.get("lost"))
        self._admissible = sorted({" ".join(c.lower().split()) for c in tw.get("admissible_commands") or ()})
        plan = list(tw.get("policy_commands") or [])
        if won:
            dist: int | None = 0
        elif lost or not plan:
            dist = None
        else:
            dist = len(plan)
        info: dict[str, Any] = {
            "admissible_commands": [] if (won or lost) else list(self._admissible),
            "won": won, "lost": lost, "task_id": self.task_id, "step": self._t, "invalid_action": invalid,
            "feedback": feedback, "description": clean_observation(str(tw.get("description") or "")),
            "inventory": str(tw.get("inventory") or "").strip(), "objective": self._objective,
            "score": float(tw.get("score") or 0), "max_score": float(tw.get("max_score") or 0),
            "oracle": {"distance_to_goal": dist, "state_id": None, "dead_end": lost,
                       "plan_commands": plan[:1] if dist else []}}
        if not (won or lost) and not self._admissible:
            info["stuck"] = True
        return info


# ---------------------------------------------------------------------------------------------------------------
# generation, cache and calibration


def _tw_make() -> str:
    exe = shutil.which("tw-make") or str(Path(sys.executable).parent / "tw-make")
    if not Path(exe).is_file():
        raise FileNotFoundError(f"tw-make not found (TextWorld's game generator): {_INSTALL}")
    return exe


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"make_games: {name} must be an integer in [{lo}, {hi}], got {value!r}")


def _tw_args(kind: str, world_size: int, nb_objects: int, quest_length: int, seed: int) -> list[str]:
    return [kind, "--world-size", str(world_size), "--nb-objects", str(nb_objects), "--quest-length",
            str(quest_length), "--seed", str(seed)]


def _generate_one(args: list[str], seed: int, root: Path, version: str) -> Path:
    """The cached game for ``args``: generated into a temporary directory, then renamed into place atomically."""
    key = hashlib.sha256(json.dumps([version, args]).encode()).hexdigest()[:16]
    final = root / key
    game = final / f"tw_{seed}.z8"
    if game.is_file() and game.with_suffix(".json").is_file():
        return game
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root))
    try:
        cmd = [_tw_make(), *args, "--output", str(tmp / f"tw_{seed}.z8"), "-f", "--silent"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TW_MAKE_TIMEOUT_S, shell=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"tw-make timed out after {TW_MAKE_TIMEOUT_S:.0f} s for seed {seed}; stderr: "
                               f"{(exc.stderr or b'')[-2000:]!r}") from exc
        if proc.returncode != 0 or not (tmp / f"tw_{seed}.z8").is_file():
            raise RuntimeError(f"tw-make failed for seed {seed} (exit {proc.returncode}); stderr:\n"
                               f"{proc.stderr[-4000:]}")
        (tmp / "args.json").write_text(json.dumps({"textworld": version, "args": args}))
        try:
            os.rename(tmp, final)  # atomic; loses the race harmlessly if another process finished first
        except OSError:
            if not game.is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return game


def random_success_rate(game_file: str | os.PathLike, episodes: int = 16, max_steps: int = 40, seed: int = 0
                        ) -> float:
    """Success rate of the uniform policy over admissible commands within ``max_steps`` steps."""
    env = TextWorldEnv(game_file, max_steps=max_steps)
    rng = random.Random(seed)
    wins = 0
    try:
        for _ in range(episodes):
            _, info = env.reset()
            done = False
            while not done:
                _, _, term, trunc, info = env.step(rng.choice(info["admissible_commands"]))
                done = term or trunc
            wins += bool(info["won"])
    finally:
        env.close()
    return wins / episodes


def _calibrated_rate(game: Path, episodes: int, max_steps: int) -> float:
    """Random-policy success, cached next to the game (it costs episodes × max_steps interpreter steps)."""
    cache = game.with_name(f"{game.stem}.calibration.json")
    key = f"{episodes}x{max_steps}"
    table = json.loads(cache.read_text()) if cache.is_file() else {}
    if key not in table:
        table[key] = random_success_rate(game, episodes, max_steps)
        write_text_atomic(cache, json.dumps(table))
    return float(table[key])


def make_games(out_dir: str | os.PathLike, n: int, seed0: int = 1000, kind: str = "custom", world_size: int = 3,
               nb_objects: int = 6, quest_length: int = 3, calibrate: tuple[float, float] | None = (0.05, 0.6), *,
               episodes: int = 16, max_steps: int = 40, max_candidates: int | None = None, workers: int = 2,
               ) -> list[Path]:
    """Generate ``n`` TextWorld games into ``out_dir`` and return their paths (``tw_<seed>.z8`` + ``.json``).

    - ``tw-make custom --world-size W --nb-objects O --quest-length L --seed S`` for S = seed0, seed0 + 1, ...:
      a subprocess with an argument list (no shell), a 120 s timeout each, ``workers`` (2) in parallel.
    - Each game is generated into a temporary directory and renamed atomically into the cache
      ``cache_root()/textworld/<hash of (textworld version, arguments)>``; ``out_dir`` receives copies.
    - With ``calibrate=(lo, hi)`` only games whose random-policy success over ``episodes`` episodes of at most
      ``max_steps`` steps lies in [lo, hi] are kept (cached per game).

    Raises ``ValueError`` for out-of-range parameters (world size 1–20, objects 0–50, quest length 1–20),
    ``RuntimeError`` with tw-make's stderr when generation fails or times out, or when fewer than ``n`` of
    ``max_candidates`` seeds (default 10·n) pass calibration.
    """
    if kind != "custom":
        raise ValueError(f"make_games: only kind='custom' is supported (tw-make custom), got {kind!r}")
    _check_range("world_size", world_size, 1, 20)
    _check_range("nb_objects", nb_objects, 0, 50)
    _check_range("quest_length", quest_length, 1, 20)
    if n < 0:
        raise ValueError(f"make_games: n must be >= 0, got {n}")
    if calibrate is not None and not 0 <= calibrate[0] <= calibrate[1] <= 1:
        raise ValueError(f"calibrate must be (lo, hi) with 0 <= lo <= hi <= 1, got {calibrate}")
    version = _textworld().__version__
    root = cache_root() / "textworld"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    limit = max_candidates if max_candidates is not None else 10 * max(n, 1)
    kept: list[Path] = []
    seed = seed0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        while len(kept) < n:
            if seed - seed0 >= limit:
                raise RuntimeError(f"only {len(kept)} of {n} TextWorld games passed calibration {calibrate} among "
                                   f"seeds {seed0}..{seed - 1}; widen the interval or change the parameters")
            width = max(1, workers) if calibrate is not None else max(1, min(workers, n - len(kept)))
            batch = list(range(seed, min(seed + width, seed0 + limit)))
            seed = batch[-1] + 1
            games = list(pool.map(lambda s: _generate_one(_tw_args(kind, world_size, nb_objects, quest_length, s),
                                                          s, root, version), batch))
            for game in games:
                if len(kept) >= n:
                    break
                if calibrate is not None and not calibrate[0] <= _calibrated_rate(game, episodes,
                                                                                  max_steps) <= calibrate[1]:
                    continue
                kept.append(_copy_game(game, out))
    return kept


def _copy_game(game: Path, out: Path) -> Path:
    """Copy the .z8/.json (and .ni) of ``game`` into ``out`` via temporary names and atomic renames."""
    for suffix in (".json", ".ni", ".z8"):  # the .z8 last: its presence means the copy is complete
        src = game.with_suffix(suffix)
        if src.is_file():
            with atomic_target(out / src.name) as tmp:
                shutil.copyfile(src, tmp)
    return out / game.name


class GamePool:
    """A fixed, sorted set of TextWorld game files and the ``task -> env`` factory for ``collect_groups``.

    ``GamePool(dir)`` takes every ``*.z8`` in a directory (each must have its ``.json``); ``GamePool([paths])`` an
    explicit list. ``pool.tasks`` are the paths; ``pool(task)`` builds a fresh :class:`TextWorldEnv` (one
    interpreter per group; the collector closes it).
    """

    def __init__(self, games: str | os.PathLike | Sequence[str | os.PathLike], max_steps: int = 40) -> None:
        if isinstance(games, (str, os.PathLike)) and Path(games).is_dir():
            paths = sorted(Path(games).glob("*.z8"))
        else:
            paths = [Path(g) for g in ([games] if isinstance(games, (str, os.PathLike)) else games)]
        if not paths:
            raise ValueError(f"GamePool: no TextWorld games (*.z8) in {games}")
        for p in paths:
            if not p.is_file():
                raise FileNotFoundError(f"GamePool: game file not found: {p}")
            if not p.with_suffix(".json").is_file():
                raise ValueError(f"GamePool: {p} has no .json metadata next to it")
        self.tasks: list[Path] = paths
        self.max_steps = max_steps

    def __len__(self) -> int:
        return len(self.tasks)

    def __call__(self, task: str | os.PathLike) -> TextWorldEnv:
        return TextWorldEnv(task, max_steps=self.max_steps)
