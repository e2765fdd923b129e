"""Graded-fidelity simulators: a ladder from "nothing ever happens" to the real dynamics, to ask whether the
one-step fidelity of a simulator predicts what a policy trained inside it achieves in the real env.

Rungs (weakest to strongest in intent): ``CopyPrevious`` (``simulator.py``); the cpt→SFT recipe stopped early
(:func:`partial_sft`, e.g. 50 SFT steps); the full cpt→SFT stage and the hybrid-RL stage (``pipeline.stage``); and
:class:`OraclePredictor`, the real env behind the predictor interface (one-step F1 = 1 by construction).

:func:`partial_sft` and :func:`evaluate_lm` cache under the pipeline's directory (``pipeline.root``), keyed by the
config fields they depend on, written to a temporary path and renamed, as the pipeline's own stages are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, KeyDoorLayout
from agentmill.methods.world_model.config import WMConfig

_PARTIAL_FIELDS = ("n_train", "n_cpt", "n_dev", "n_test", "episodes", "seed", "tokenizer", "bpe_vocab", "layers",
                   "d", "heads", "max_len", "batch", "cpt_steps", "cpt_seq", "cpt_lr", "sft_lr")


def _obs_key(obs: str) -> tuple[str, ...]:
    """The observation without its feedback line (the part that names the state): room line onwards."""
    lines = obs.strip().split("\n")
    i = next((k for k, ln in enumerate(lines) if ln.startswith("-= ")), 0)
    return tuple(lines[i:])


class OraclePredictor:
    """The perfect world model of one KeyDoor layout: the real env behind the ``Predictor`` interface.

    Stateless across calls: at construction a breadth-first search from the start state records, for every
    reachable observation (feedback line dropped), one shortest command path from ``reset()``; ``predict_next``
    replays that path in a private env and then steps the asked action. Needs a world whose observation names its
    state (the Markov-observable world of ``data.WM_WORLD``) and no slips; both are checked here. An observation the search
    never reached (impossible from a real start) gives ``None`` (a parse failure for ``SimulatedEnv``).
    """

    def __init__(self, layout: KeyDoorLayout, config: KeyDoorConfig) -> None:
        if config.slip:
            raise ValueError("OraclePredictor needs deterministic dynamics (slip = 0)")
        # a private env without the step limit, so replaying a path never meets truncation
        self.config = dataclasses.replace(config, max_steps=10_000)
        self.env = KeyDoorEnv(layout, self.config)
        self.paths: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.calls = 0
        start, info = self.env.reset(seed=0)
        self.paths[_obs_key(start)] = ()
        queue = deque([((), info["admissible_commands"])])
        seen_state = {self.env.state}
        while queue:
            path, cmds = queue.popleft()
            for c in cmds:
                obs, info = self._replay(path + (c,))
                s = self.env.state
                if s in seen_state or info["won"]:
                    continue
                seen_state.add(s)
                key = _obs_key(obs)
                if key in self.paths:
                    raise ValueError(f"layout {layout.task_id}: two states render alike; the oracle needs a "
                                     "Markov-observable world")
                self.paths[key] = path + (c,)
                queue.append((path + (c,), info["admissible_commands"]))

    def _replay(self, path: Sequence[str]) -> tuple[str, dict]:
        obs, info = self.env.reset(seed=0)
        for c in path:
            obs, _, _, _, info = self.env.step(c)
        return obs, info

    def predict_next(self, items: Sequence[tuple[str, str, str, str | None]]) -> list[str | None]:
        out: list[str | None] = []
        for obs, action, _goal, _card in items:
            self.calls += 1
            path = self.paths.get(_obs_key(obs))
            if path is None:
                out.append(None)
                continue
            self._replay(path)
            out.append(self.env.step(action)[0])
        return out


# ---------------------------------------------------------------------------------------------------------------
# the recipe stopped early

def _key(cfg: WMConfig, extra: dict[str, Any]) -> str:
    blob = json.dumps({**{f: getattr(cfg, f) for f in _PARTIAL_FIELDS}, **extra}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def partial_sft(cfg: WMConfig, steps: int) -> tuple[Any, dict[str, Any]]:
    """The cpt→SFT stage of ``pipeline`` with ``steps`` SFT steps instead of ``cfg.sft_steps`` (its own warm-up and
    cosine schedule over ``steps``; same data, learning rate and seed): a deliberately under-trained simulator.
    Cached under ``pipeline.root(cfg)``; returns (model, training log)."""
    from agentmill.lm.tiny import TinyLM
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.format import RENDERER_VERSION
    from agentmill.methods.world_model.train import StageConfig, train_sft

    if steps < 1:
        raise ValueError(f"partial_sft needs steps >= 1, got {steps}")
    path = P.root(cfg) / f"sft{steps}-{_key(cfg, {'partial_sft_steps': steps})}"
    if (path / "log.json").exists():
        log = json.loads((path / "log.json").read_text())
        if log.get("renderer") != RENDERER_VERSION:
            raise ValueError(f"{path}: trained with renderer {log.get('renderer')}, this is {RENDERER_VERSION}")
        return TinyLM.load(path / "model"), log
    t0 = time.perf_counter()
    lm = P.stage(cfg, "cpt")[0]
    exs = P.examples(cfg, "train")
    losses = train_sft(lm, exs, StageConfig(steps=steps, lr=cfg.sft_lr, batch=cfg.batch, seed=cfg.seed,
                                            seq_len=cfg.max_len))
    log = {"losses": losses, "examples": len(exs), "sft_steps": steps, "seconds": time.perf_counter() - t0,
           "renderer": RENDERER_VERSION}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    lm.save(tmp / "model")
    (tmp / "log.json").write_text(json.dumps(log))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return lm, log


def evaluate_lm(cfg: WMConfig, lm: Any, name: str, split: str = "test") -> list[dict[str, Any]]:
    """Greedy one-step predictions of ``lm`` on the pipeline's fixed evaluation subset, scored per item (the same
    items, decoding cap and scorer as ``pipeline.evaluate``). Cached by ``name`` and the weights' hash."""
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.model import GREEDY, WorldModel, score_items

    wm = WorldModel(lm, KeyDoorDomain(), P.FMT, dataclasses.replace(GREEDY, max_new_tokens=cfg.rl_max_new))
    ident = hashlib.sha256(wm.identity.encode()).hexdigest()[:12]
    path = P.root(cfg) / "eval" / f"{name}-{ident}-{_key(cfg, {'eval_items': cfg.eval_items, 'rl_max_new': cfg.rl_max_new})}_{split}.json"
    if path.exists():
        return json.loads(path.read_text())
    exs = P.eval_examples(cfg, split)
    preds = wm.predict_examples(exs)
    items = score_items(KeyDoorDomain(), exs, preds)
    rows = [{"task_id": i.task_id, "t": e.t, "changed": i.changed, "f1": i.f1, "em": i.em, "parse_ok": i.parse_ok}
            for i, e in zip(items, exs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows))
    os.replace(tmp, path)
    return rows


def reference_rows(cfg: WMConfig, kind: str, split: str = "test") -> list[dict[str, Any]]:
    """Per-item one-step scores of the two model-free rungs on the same evaluation items: ``copy`` (predict the
    current observation) and ``oracle`` (predict the real next observation: F1 = 1)."""
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.judges import exact_match, field_f1

    if kind not in ("copy", "oracle"):
        raise ValueError(f"kind must be 'copy' or 'oracle', got {kind!r}")
    dom = KeyDoorDomain()
    rows = []
    for e in P.eval_examples(cfg, split):
        pred = e.obs if kind == "copy" else e.next_obs
        rows.append({"task_id": e.task_id, "t": e.t, "changed": e.changed, "f1": field_f1(dom, pred, e.next_obs),
                     "em": exact_match(pred, e.next_obs), "parse_ok": True})
    return rows
