"""The shared, cached stage pipeline: data → CPT → SFT → RL arms, each stage saved under
``core.paths.cache_root()/world_model/v<version>/<stage>-<hash of the config fields it depends on>/`` (temp dir, then
rename), so experiments share stages and a killed run resumes at the last finished one.

Stages: ``cpt`` (from random init), ``cpt_sft`` (SFT from ``cpt``), ``sft_only`` (SFT from random init for
cpt_steps + sft_steps steps: equal total steps), ``sft_no_reasoning`` (``sft_only`` with observation-only targets),
``shuffled_sft`` (``sft_only`` on targets permuted within action verbs: the negative control), ``rl_hybrid``,
``rl_rule``, ``rl_naive`` (GRPO from ``cpt_sft`` on the named reward).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.lm.tiny import TinyLM
from agentmill.methods.world_model.config import WMConfig
from agentmill.methods.world_model.data import (KEYDOOR_MANUAL, TransitionTable, WMExample, assign_splits,
                                                build_examples, collect_keydoor, cpt_documents)
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.format import RENDERER_VERSION, QwenFormat
from agentmill.methods.world_model.train import RLConfig, StageConfig, new_model, train_cpt, train_grpo, train_sft

PIPELINE_VERSION = "2"
"""Bumped whenever data collection or training code changes, so a cached stage is never served to newer code."""
STAGES = ("cpt", "cpt_sft", "sft_only", "sft_no_reasoning", "shuffled_sft", "rl_hybrid", "rl_rule", "rl_naive")
FMT = QwenFormat(history_k=0, system_prompt="short", card=True)
"""The tiny models' format: no history window (the card and the current state determine the next KeyDoor
observation), the short system prompt, the card on."""


_DATA = ("n_train", "n_cpt", "n_dev", "n_test", "episodes", "seed")
_TOK = _DATA + ("tokenizer", "bpe_vocab")
_MODEL = _TOK + ("layers", "d", "heads", "max_len", "batch")
_FIELDS = {"cpt": _MODEL + ("cpt_steps", "cpt_seq", "cpt_lr"),
           "cpt_sft": _MODEL + ("cpt_steps", "cpt_seq", "cpt_lr", "sft_steps", "sft_lr"),
           "sft_only": _MODEL + ("cpt_steps", "sft_steps", "sft_lr"),
           "sft_no_reasoning": _MODEL + ("cpt_steps", "sft_steps", "sft_lr"),
           "shuffled_sft": _MODEL + ("cpt_steps", "sft_steps", "sft_lr")}
_RL = _FIELDS["cpt_sft"] + ("rl_iterations", "rl_prompts", "rl_k", "rl_max_new", "rl_lr", "rl_beta")
_EVAL = ("eval_items", "rl_max_new")


def _key(cfg: WMConfig, fields: tuple[str, ...]) -> str:
    """Hash of the config fields a cached artefact depends on (so changing an RL setting keeps the SFT stages)."""
    blob = json.dumps({f: getattr(cfg, f) for f in fields}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def root(cfg: WMConfig) -> Path:
    """The pipeline cache: one directory per artefact, named by the hash of the config fields it depends on."""
    return cache_root() / "world_model" / f"v{PIPELINE_VERSION}"


def stage_path(cfg: WMConfig, name: str) -> Path:
    return root(cfg) / f"{name}-{_key(cfg, _FIELDS.get(name, _RL))}"


def data(cfg: WMConfig) -> TransitionTable:
    path = root(cfg) / f"data-{_key(cfg, _DATA)}" / "transitions.jsonl"
    if path.exists():
        return TransitionTable.from_jsonl(path)
    tasks = assign_splits(cfg.n_train, cfg.n_cpt, cfg.n_dev, cfg.n_test, cfg.seed)
    table = collect_keydoor(tasks, cfg.episodes, seed=cfg.seed)
    table.to_jsonl(path)
    return table


def examples(cfg: WMConfig, split: str, **kw: Any) -> list[WMExample]:
    return build_examples(data(cfg).split(split), FMT, KeyDoorDomain(), seed=cfg.seed, **kw)


def eval_examples(cfg: WMConfig, split: str = "test", n: int | None = None) -> list[WMExample]:
    """A fixed, seeded subset of ``split`` examples: half changed, half unchanged/invalid when possible."""
    n = n or cfg.eval_items
    exs = examples(cfg, split)
    rng = np.random.default_rng(cfg.seed + 17)
    ch = [e for e in exs if e.changed]
    un = [e for e in exs if not e.changed]
    a = [ch[int(i)] for i in rng.permutation(len(ch))[:n // 2]]
    b = [un[int(i)] for i in rng.permutation(len(un))[:n - len(a)]]
    return sorted(a + b, key=lambda e: (e.task_id, e.t))


def tokenizer(cfg: WMConfig) -> Any:
    """The BPE of this pipeline (trained once on the CPT documents and the SFT texts, cached), or None (bytes)."""
    if cfg.tokenizer == "byte":
        return None
    from tokenizers import Tokenizer

    from agentmill.lm.tiny import train_bpe

    path = root(cfg) / f"tok-{_key(cfg, _TOK)}" / "tokenizer.json"
    if path.exists():
        return Tokenizer.from_file(str(path))
    texts = cpt_documents(data(cfg).split("cpt"), FMT, KEYDOOR_MANUAL)
    texts += [e.prompt + e.target for e in examples(cfg, "train")]
    tok = train_bpe(texts, vocab_size=cfg.bpe_vocab)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)
    return tok


def _fresh(cfg: WMConfig) -> TinyLM:
    return new_model(cfg.layers, cfg.d, cfg.heads, cfg.max_len, cfg.seed, tokenizer(cfg))


def _save(lm: TinyLM, path: Path, log: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    lm.save(tmp / "model")
    (tmp / "log.json").write_text(json.dumps({**log, "renderer": RENDERER_VERSION}))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def stage(cfg: WMConfig, name: str) -> tuple[TinyLM, dict[str, Any]]:
    """The model after stage ``name`` and its training log, training it (and its parents) when not cached."""
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {STAGES}")
    path = stage_path(cfg, name)
    if (path / "log.json").exists():
        log = json.loads((path / "log.json").read_text())
        if log.get("renderer") != RENDERER_VERSION:
            raise ValueError(f"{path}: trained with renderer {log.get('renderer')}, this is {RENDERER_VERSION}")
        return TinyLM.load(path / "model"), log
    t0 = time.perf_counter()
    sup = dict(batch=cfg.batch, seed=cfg.seed, seq_len=cfg.max_len)
    if name == "cpt":
        lm = _fresh(cfg)
        docs = cpt_documents(data(cfg).split("cpt"), FMT, KEYDOOR_MANUAL)
        losses = train_cpt(lm, docs, StageConfig(steps=cfg.cpt_steps, lr=cfg.cpt_lr, **{**sup, "seq_len": cfg.cpt_seq}))
        log: dict[str, Any] = {"losses": losses, "docs": len(docs), "bytes": sum(len(d) for d in docs)}
    elif name in ("cpt_sft", "sft_only", "sft_no_reasoning", "shuffled_sft"):
        lm = stage(cfg, "cpt")[0] if name == "cpt_sft" else _fresh(cfg)
        steps = cfg.sft_steps if name == "cpt_sft" else cfg.cpt_steps + cfg.sft_steps
        exs = examples(cfg, "train", shuffle_targets=name == "shuffled_sft",
                       reasoning="none" if name == "sft_no_reasoning" else "template")
        losses = train_sft(lm, exs, StageConfig(steps=steps, lr=cfg.sft_lr, **sup))
        log = {"losses": losses, "examples": len(exs)}
    else:
        from agentmill.methods.world_model.rewards import make_reward

        lm = stage(cfg, "cpt_sft")[0]
        kind = {"rl_hybrid": "hybrid", "rl_rule": "rule", "rl_naive": "judge_naive"}[name]
        rl = RLConfig(iterations=cfg.rl_iterations, prompts=cfg.rl_prompts, k=cfg.rl_k, max_new=cfg.rl_max_new,
                      lr=cfg.rl_lr, beta=cfg.rl_beta, seed=cfg.seed)
        rlog = train_grpo(lm, examples(cfg, "train"), make_reward(kind, KeyDoorDomain()), rl)
        log = {"rl": dataclasses.asdict(rlog), "reward": kind}
    log["seconds"] = time.perf_counter() - t0
    _save(lm, path, log)
    return lm, log


def evaluate(cfg: WMConfig, name: str, split: str = "test") -> list[dict[str, Any]]:
    """Greedy predictions of stage ``name`` on the fixed evaluation subset, scored per item (cached)."""
    from agentmill.methods.world_model.judges import JudgeItem, LexicalRubricJudge
    from agentmill.methods.world_model.model import GREEDY, WorldModel, score_items

    path = root(cfg) / "eval" / f"{stage_path(cfg, name).name}-{_key(cfg, _EVAL)}_{split}.json"
    if path.exists():
        return json.loads(path.read_text())
    lm, _ = stage(cfg, name)
    exs = eval_examples(cfg, split)
    wm = WorldModel(lm, KeyDoorDomain(), FMT, dataclasses.replace(GREEDY, max_new_tokens=cfg.rl_max_new))
    t0 = time.perf_counter()
    preds = wm.predict_examples(exs)
    dt = time.perf_counter() - t0
    items = score_items(KeyDoorDomain(), exs, preds)
    naive = LexicalRubricJudge(KeyDoorDomain(), sees="raw")
    rows = [{"naive_judge": (naive.score(JudgeItem(p.text, e.next_obs, (e.obs,), e.card)).total - 1) / 4,
             "episode": f"{e.task_id}", "t": e.t,
             "task_id": i.task_id, "changed": i.changed, "f1": i.f1, "em": i.em, "parse_ok": i.parse_ok,
             "praise_full": i.praise_full, "praise_obs": i.praise_obs, "length": i.length, "dims": i.dims.as_dict(),
             "text": p.text, "seconds": dt / max(1, len(exs))} for i, p, e in zip(items, preds, exs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows))
    os.replace(tmp, path)
    return rows
