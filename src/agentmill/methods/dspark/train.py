"""Training the drafter on the feature cache (arXiv:2607.05147 [A]; loss and optimiser as DeepSpec [C]).

Each step samples ``batch_sequences`` cached sequences and ``num_anchors`` anchors per sequence (a valid anchor a has
response tokens at a and a+1), builds the teacher-forced blocks, and minimises ``0.1·CE + 0.9·L1 + 1.0·BCE(conf)``
with position weights ``exp(−(k−1)/4)`` (DeepSpec ``loss.py``). AdamW at 6e-4 with 4% warm-up and cosine decay
(DeepSpec ``config/dspark``); gradient clip 1.0 and weight decay 0 are this project's [R] (docs/methods/dspark.md).
Checkpoints are atomic every ``checkpoint_every`` steps and hold the optimiser and data RNG, so a killed run resumes
exactly; they are safetensors files with a JSON header (:func:`agentmill.lm.finetune.save_checkpoint`), never pickles.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentmill.lm.finetune import load_checkpoint, save_checkpoint
from agentmill.methods.dspark.drafter import DSparkDrafter, TrainBatch, forward_train
from agentmill.methods.dspark.features import FeatureCache


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2000
    batch_sequences: int = 8
    num_anchors: int = 16
    lr: float = 6e-4
    warmup_frac: float = 0.04
    ce_alpha: float = 0.1
    l1_alpha: float = 0.9
    conf_alpha: float = 1.0
    loss_decay_gamma: float = 4.0
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 200
    schedule_steps: int | None = None
    """Length of the cosine schedule (default ``steps``); the equal-compute Markov ablation runs branches on one
    schedule spanning N + M steps [R]."""


def lr_at(step: int, tcfg: TrainConfig) -> float:
    total = tcfg.schedule_steps or tcfg.steps
    warm = max(1, round(tcfg.warmup_frac * total))
    if step < warm:
        return tcfg.lr * (step + 1) / warm
    frac = min(1.0, (step - warm) / max(1, total - warm))
    return tcfg.lr * 0.5 * (1 + math.cos(math.pi * frac))


def make_batch(cache: FeatureCache, seqs: np.ndarray, model: DSparkDrafter, num_anchors: int,
               rng: np.random.Generator) -> TrainBatch:
    """Pad the chosen sequences, sample anchors, gather labels and the target's probabilities on D."""
    g = model.cfg.block_size
    sl = [cache.sequence(int(s)) for s in seqs]
    L = max(s.stop - s.start for s in sl)
    B, A = len(sl), num_anchors
    md = cache.taps.shape[1]
    taps = torch.zeros((B, L, md))
    tokens = torch.zeros((B, L), dtype=torch.long)
    anchors = torch.full((B, A), -1, dtype=torch.long)
    labels = torch.full((B, A, g), -1, dtype=torch.long)
    valid = torch.zeros((B, A, g), dtype=torch.bool)
    hid = torch.zeros((B, A, g, cache.final_hidden.shape[1]))
    lse = torch.zeros((B, A, g))
    for b, s in enumerate(sl):
        n = s.stop - s.start
        tok = np.asarray(cache.tokens[s], dtype=np.int64)
        lm = np.asarray(cache.loss_mask[s])
        taps[b, :n] = torch.from_numpy(np.asarray(cache.taps[s], dtype=np.float32))
        tokens[b, :n] = torch.from_numpy(tok)
        ok = np.flatnonzero(lm[:-1] & lm[1:])
        if not len(ok):
            continue
        pick = np.sort(rng.choice(ok, size=min(A, len(ok)), replace=False))
        na = len(pick)
        idx = pick[:, None] + np.arange(1, g + 1)[None]                    # [na, g] label positions a+k
        inb = idx < n
        idc = np.minimum(idx, n - 1)
        ok_k = np.cumprod(inb & lm[idc], axis=1).astype(bool)               # supervised prefix (eval_mask)
        anchors[b, :na] = torch.from_numpy(pick)
        labels[b, :na] = torch.from_numpy(np.where(ok_k, tok[idc], -1))
        valid[b, :na] = torch.from_numpy(ok_k)
        rows = s.start + (idc - 1)                                          # the target row predicting a+k
        hid[b, :na] = torch.from_numpy(np.asarray(cache.final_hidden[rows.ravel()], dtype=np.float32)
                                       ).view(na, g, -1) * torch.from_numpy(ok_k)[..., None]
        lse[b, :na] = torch.from_numpy(np.asarray(cache.lse[rows.ravel()], dtype=np.float32)).view(na, g)
    with torch.no_grad():
        logp = torch.nn.functional.linear(hid, model.lm_head) - lse[..., None]
        p = logp.exp() * valid[..., None]
        p_out = (1 - p.sum(-1)).clamp_min(0) * valid
    return TrainBatch(taps, tokens, anchors, p, p_out, labels, valid)


def train_drafter(model: DSparkDrafter, cache: FeatureCache, tcfg: TrainConfig, out: Path, *,
                  train_seqs: np.ndarray | None = None, start_step: int = 0, progress: Any = None,
                  log_every: int = 20) -> dict[str, Any]:
    """Train ``model`` in place for ``tcfg.steps`` steps from ``start_step`` (steps index the cosine schedule),
    resuming from ``out/ckpt.safetensors`` when it exists. Writes ``out/log.jsonl``; returns the last logged parts."""
    torch.manual_seed(tcfg.seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seqs = np.arange(cache.n_sequences) if train_seqs is None else np.asarray(train_seqs)
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=tcfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(tcfg.seed)
    step = start_step
    ck = out / "ckpt.safetensors"
    if ck.exists():
        state = load_checkpoint(ck)
        model.load_state_dict(state.params, strict=False)
        opt.load_state_dict(state.optimizer)
        rng.bit_generator.state = state.meta["rng"]
        step = int(state.meta["step"])
    end = start_step + tcfg.steps
    last: dict[str, Any] = {}
    t0 = time.perf_counter()
    with (out / "log.jsonl").open("a") as log:
        while step < end:
            for grp in opt.param_groups:
                grp["lr"] = lr_at(step, tcfg)
            pick = rng.choice(seqs, size=min(tcfg.batch_sequences, len(seqs)), replace=False)
            batch = make_batch(cache, pick, model, tcfg.num_anchors, rng)
            res = forward_train(model, batch, loss_decay_gamma=tcfg.loss_decay_gamma, ce_alpha=tcfg.ce_alpha,
                                l1_alpha=tcfg.l1_alpha, conf_alpha=tcfg.conf_alpha)
            opt.zero_grad(set_to_none=True)
            res.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.trainable_parameters(), tcfg.grad_clip)
            opt.step()
            step += 1
            if step % log_every == 0 or step == end:
                last = {"step": step, "loss": float(res.loss.detach()), "lr": lr_at(step - 1, tcfg),
                        "seconds": round(time.perf_counter() - t0, 1), **res.parts}
                log.write(json.dumps(last) + "\n")
                log.flush()
            if progress is not None:
                progress(1)
            if step % tcfg.checkpoint_every == 0 or step == end:
                save_checkpoint(ck, params=model.state_dict(), optimizer=opt,
                                meta={"rng": rng.bit_generator.state, "step": step, "tcfg": asdict(tcfg)})
    return last
