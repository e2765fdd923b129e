"""``SimulatedEnv``: a world model behind the ``TextEnv`` interface, usable anywhere a real env is.

``reset`` takes the real env's initial observation (one real reset); ``step(a)`` renders the prompt from the task
card, the current (simulated) observation and the action, asks the predictor, and reads reward, termination and the
admissible commands back from the *simulated* text (``Domain.outcome_from_observation`` /
``admissible_from_text``): a hallucinated exit becomes an action the policy can exploit, as in model-based RL. A
failed parse gives the env's invalid-command line and ``info["sim_parse_failure"]``. The oracle namespace is present
(``check_info``) but unknown: a simulator has no privileged state.

``make("wm:<dir>", layout_seed=…)`` builds one from a saved world-model directory (``save_world_model``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from agentmill.envs.keydoor import INVALID_FEEDBACK, KeyDoorConfig, KeyDoorEnv, KeyDoorLayout, generate_layout
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.format import QwenFormat, Turn, action_json


class Predictor(Protocol):
    """Anything that maps (observation, action) of a task to the next observation (None = no parse)."""

    def predict_next(self, items: Sequence[tuple[str, str, str, str | None]]) -> list[str | None]: ...


class WMPredictor:
    """A :class:`~agentmill.methods.world_model.model.WorldModel` as a predictor (greedy, cached)."""

    def __init__(self, wm: Any) -> None:
        self.wm = wm

    def predict_next(self, items: Sequence[tuple[str, str, str, str | None]]) -> list[str | None]:
        prompts = [self.wm.prompt_for([], Turn(o, action_json(a), "", 0), goal=g, card=c) for o, a, g, c in items]
        return [p.observation for p in self.wm.predict_batch(prompts)]


class CopyPrevious:
    """The copy-previous baseline simulator: the next observation is the current one (nothing ever happens)."""

    def predict_next(self, items: Sequence[tuple[str, str, str, str | None]]) -> list[str | None]:
        return [o for o, _, _, _ in items]


def _fields(obs: str) -> tuple[str, str, str]:
    """(feedback, description, inventory) of a KeyDoor-style observation, as the real env's info has them."""
    lines = obs.strip().split("\n")
    i = next((k for k, ln in enumerate(lines) if ln.startswith("-= ")), 0)
    inv = lines[-1] if lines and lines[-1].startswith("You are carrying") else ""
    desc_lines = lines[i:len(lines) - 1] if inv else lines[i:]
    return " ".join(lines[:i]), "\n".join(desc_lines), inv


class SimulatedEnv:
    """One task simulated by ``predictor`` (module docstring). ``info`` passes ``envs.base.check_info``."""

    def __init__(self, predictor: Predictor, layout: KeyDoorLayout, config: KeyDoorConfig, *,
                 domain: KeyDoorDomain | None = None, max_steps: int | None = None) -> None:
        self.predictor, self.layout, self.config = predictor, layout, config
        self.domain = domain or KeyDoorDomain()
        self.card = self.domain.card(layout)
        self.max_steps = max_steps or config.max_steps
        self._real = KeyDoorEnv(layout, config)
        self._obs: str | None = None
        self._t = 0
        self.wm_calls = 0

    def _info(self, obs: str, invalid: bool, won: bool, parse_failure: bool) -> dict[str, Any]:
        fb, desc, inv = _fields(obs)
        return {"admissible_commands": [] if won else self.domain.admissible_from_text(obs, self.card),
                "won": won, "lost": False, "task_id": self.layout.task_id, "step": self._t,
                "invalid_action": invalid, "feedback": fb, "description": desc, "inventory": inv,
                "objective": self.layout.objective, "sim_parse_failure": parse_failure,
                "oracle": {"distance_to_goal": None, "state_id": None, "dead_end": False, "plan_commands": []}}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        obs, _ = self._real.reset(seed=seed)
        self._obs, self._t = obs, 0
        return obs, self._info(obs, False, False, False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._obs is None:
            raise RuntimeError("SimulatedEnv.step called before reset() or after the episode ended")
        self._t += 1
        self.wm_calls += 1
        pred = self.predictor.predict_next([(self._obs, action, self.layout.objective, self.card)])[0]
        failure = pred is None or self.domain.parse(pred) is None
        if failure:
            pred = INVALID_FEEDBACK + "\n" + "\n".join(self._obs.split("\n")[1:]) if self._obs else INVALID_FEEDBACK
        r, term = self.domain.outcome_from_observation(pred, action)
        trunc = not term and self._t >= self.max_steps
        info = self._info(pred, INVALID_FEEDBACK in pred, term and r > 0, failure)
        self._obs = None if (term or trunc) else pred
        return pred, r, term, trunc, info

    def close(self) -> None:
        self._obs = None


def prewarm(predictor: Predictor, layout: KeyDoorLayout, config: KeyDoorConfig, *, max_pairs: int = 200,
            depth: int | None = None, domain: KeyDoorDomain | None = None) -> int:
    """Breadth-first expansion of the *simulated* state graph from the real start, predicting every (observation,
    admissible action) pair level by level in batches, so a greedy cache already holds what the policy will ask.
    Under greedy decoding this changes no result, only the wall time. Returns the pairs predicted."""
    domain = domain or KeyDoorDomain()
    card = domain.card(layout)
    start, _ = KeyDoorEnv(layout, config).reset()
    frontier, seen, done = [start], {start}, 0
    for _ in range(depth or config.max_steps):
        items = [(o, a, layout.objective, card) for o in frontier for a in domain.admissible_from_text(o, card)]
        items = items[:max(0, max_pairs - done)]
        if not items:
            break
        outs = predictor.predict_next(items)
        done += len(items)
        frontier = []
        for o in outs:
            if o is not None and o not in seen and domain.parse(o) is not None and "You won" not in o:
                seen.add(o)
                frontier.append(o)
    return done


# ---------------------------------------------------------------------------------------------------------------
# wm:<dir> specs

def save_world_model(out: str | Path, lm: Any, config: KeyDoorConfig, *, fmt: QwenFormat = QwenFormat()) -> Path:
    """Save a tiny world model with the world config it simulates (``wm.json`` + ``model/``)."""
    from dataclasses import asdict

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lm.save(out / "model")
    (out / "wm.json").write_text(json.dumps({"domain": "keydoor", "config": asdict(config), "format": asdict(fmt)}))
    return out


def make_wm_env(path: str, *, layout_seed: int = 0, max_steps: int | None = None) -> SimulatedEnv:
    """``envs.make("wm:<dir>", layout_seed=3)``: the simulated KeyDoor task ``layout_seed`` from a saved WM."""
    from agentmill.lm.tiny import TinyLM
    from agentmill.methods.world_model.model import WorldModel

    root = Path(path).expanduser()
    meta_file = root / "wm.json"
    if not meta_file.exists():
        raise FileNotFoundError(f"wm:{path}: no wm.json there; save one with world_model.save_world_model")
    meta = json.loads(meta_file.read_text())
    if meta.get("domain") != "keydoor":
        raise ValueError(f"wm:{path}: domain {meta.get('domain')!r} is not simulated here (keydoor only)")
    cfg = KeyDoorConfig(**meta["config"])
    fmt = QwenFormat(**meta.get("format", {}))
    wm = WorldModel(TinyLM.load(root / "model"), KeyDoorDomain(), fmt)
    return SimulatedEnv(WMPredictor(wm), generate_layout(layout_seed, cfg), cfg, max_steps=max_steps)
