"""The recipe on user data, one stage at a time (what ``agentmill world-model train|eval|simulate`` call): a
directory per stage holds ``model/`` (weights, config and the BPE tokenizer) and ``log.json``."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.lm.tiny import TinyLM, train_bpe
from agentmill.methods.world_model.data import (KEYDOOR_MANUAL, WM_WORLD, TransitionTable, build_examples,
                                                cpt_documents)
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.format import RENDERER_VERSION
from agentmill.methods.world_model.pipeline import FMT
from agentmill.methods.world_model.train import RLConfig, StageConfig, new_model, train_cpt, train_grpo, train_sft


def train_stage(stage: str, data: Path, out: Path, *, init: Path | None = None, steps: int = 100,
                reward: str = "hybrid", seed: int = 0, d: int = 64, layers: int = 2,
                lr: float | None = None) -> dict[str, Any]:
    """Train ``stage`` (cpt / sft / rl) from ``init`` (a stage directory) or from a fresh BPE model; save to
    ``out`` and return the log."""
    if stage not in ("cpt", "sft", "rl"):
        raise ValueError(f"stage must be cpt, sft or rl, got {stage!r}")
    table = TransitionTable.from_jsonl(data)
    dom = KeyDoorDomain()
    train = build_examples(table.split("train"), FMT, dom, seed=seed)
    docs = cpt_documents(table.split("cpt"), FMT, KEYDOOR_MANUAL)
    if init is not None:
        meta = json.loads((init / "log.json").read_text())
        if meta.get("renderer") != RENDERER_VERSION:
            raise ValueError(f"{init}: trained with renderer {meta.get('renderer')}, this is {RENDERER_VERSION}")
        lm = TinyLM.load(init / "model")
    else:
        if stage == "rl":
            raise ValueError("rl needs --init (an SFT stage directory)")
        lm = new_model(layers, d, 4, 512, seed, train_bpe(docs + [e.prompt + e.target for e in train], 1024))
    t0 = time.perf_counter()
    if stage == "cpt":
        losses = train_cpt(lm, docs, StageConfig(steps=steps, seq_len=256, seed=seed, lr=lr or 1e-3))
        log: dict[str, Any] = {"losses": losses}
    elif stage == "sft":
        losses = train_sft(lm, train, StageConfig(steps=steps, seq_len=lm.cfg.max_len, seed=seed, lr=lr or 3e-3))
        log = {"losses": losses}
    else:
        from agentmill.methods.world_model.rewards import make_reward

        rl = train_grpo(lm, train, make_reward(reward, dom), RLConfig(iterations=steps, prompts=4, k=4,
                                                                       max_new=160, seed=seed, lr=lr or 5e-5))
        log = {"rl": dataclasses.asdict(rl), "reward": reward}
    log.update({"stage": stage, "steps": steps, "seconds": time.perf_counter() - t0, "renderer": RENDERER_VERSION,
                "final_loss": (log.get("losses") or [None])[-1]})
    out.mkdir(parents=True, exist_ok=True)
    lm.save(out / "model")
    tmp = out / "log.json.tmp"
    tmp.write_text(json.dumps(log))
    os.replace(tmp, out / "log.json")
    return log


def load_wm(spec: str):
    """A ``WorldModel`` from a stage directory or any LM spec."""
    from agentmill.methods.world_model.model import GREEDY, WorldModel

    p = Path(spec)
    lm: Any = TinyLM.load(p / "model") if (p / "model").is_dir() else spec
    return WorldModel(lm, KeyDoorDomain(), FMT, dataclasses.replace(GREEDY, max_new_tokens=160))


def evaluate_dir(spec: str, data: Path, *, split: str = "test", n: int = 96, closed_loop: int = 0) -> dict[str, Any]:
    """One-step greedy scores (and optionally the closed-loop F1 curve) of the WM named by ``spec``."""
    from agentmill.methods.world_model import model as M

    table = TransitionTable.from_jsonl(data)
    exs = build_examples(table.split(split), FMT, KeyDoorDomain())
    rng = np.random.default_rng(0)
    ch = [e for e in exs if e.changed]
    un = [e for e in exs if not e.changed]
    pick = [ch[int(i)] for i in rng.permutation(len(ch))[:n // 2]]
    pick += [un[int(i)] for i in rng.permutation(len(un))[:n - len(pick)]]
    wm = load_wm(spec)
    items = M.score_items(wm.domain, pick, wm.predict_examples(pick))
    rep: dict[str, Any] = {"summary": M.summarise(items), "wm": spec, "split": split}
    if closed_loop:
        eps = [ep for ep in table.episodes(split) if len(ep) >= closed_loop][:32]
        if eps:
            rep["closed_loop_f1"] = np.nanmean(M.closed_loop(wm, eps, closed_loop), 0).tolist()
    return rep


def simulate_random(spec: str, layout_seed: int, episodes: int, seed: int) -> dict[str, Any]:
    """Uniform-random play in the simulated and the real task: success, steps, WM calls, parse failures."""
    from agentmill.envs.keydoor import KeyDoorEnv, generate_layout
    from agentmill.methods.world_model.simulator import SimulatedEnv, WMPredictor

    lay = generate_layout(layout_seed, WM_WORLD)
    out: dict[str, Any] = {"layout": lay.task_id}
    wm = load_wm(spec)
    for name, env in (("sim", SimulatedEnv(WMPredictor(wm), lay, WM_WORLD)), ("real", KeyDoorEnv(lay, WM_WORLD))):
        rng = np.random.default_rng(seed)
        wins = steps = failures = 0
        for e in range(episodes):
            obs, info = env.reset(seed=e)
            done = False
            while not done:
                a = info["admissible_commands"][int(rng.integers(len(info["admissible_commands"])))]
                obs, r, term, trunc, info = env.step(a)
                steps += 1
                failures += bool(info.get("sim_parse_failure"))
                done = term or trunc
            wins += bool(info["won"])
        out[name] = {"success": wins / episodes, "steps": steps, "parse_failures": failures}
    out["wm_cache"] = {"hits": wm.cache.hits, "misses": wm.cache.misses} if wm.cache else None
    return out
