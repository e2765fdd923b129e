"""The three stages at small scale on a ``tiny:`` byte model trained from scratch (docs/methods/world_model.md).

1. ``train_cpt``: next-byte cross-entropy on every byte of packed documents (episodes in the history layout plus a
   manual) [P stage; R details].
2. ``train_sft``: cross-entropy on the target bytes only (reasoning + observation + EOS) [P stage; R reasoning].
3. ``train_grpo``: group-relative policy gradient on the fidelity reward: K samples per prompt, advantages
   (R − mean)/(std + 1e-4) within the group (TRL ``scale_rewards="group"``), zero-variance groups dropped and counted,
   token-level normalisation (DAPO, arXiv 2503.14476), k3 KL to the frozen init with β (GRPO, arXiv 2402.03300);
   one optimiser step per batch (μ = 1, so the ratio is 1 and the clip is inactive).

All three backpropagate through ``TinyLM.model`` on one thread. Token ids come from the model's tokenizer (bytes or
the BPE of ``lm.tiny.train_bpe``).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.lm.base import GenerateConfig
from agentmill.lm.tiny import BOS, TinyConfig, TinyLM
from agentmill.methods.world_model.data import WMExample
from agentmill.methods.world_model.rewards import RewardFn


@dataclass(frozen=True)
class StageConfig:
    """One supervised stage (CPT or SFT) of a tiny model."""

    steps: int = 200
    """Optimiser steps."""
    batch: int = 8
    """Sequences per step."""
    seq_len: int = 1024
    """Bytes per CPT window / the longest SFT example kept (longer ones are cut from the left of the prompt)."""
    lr: float = 1e-3
    """Peak AdamW learning rate [R: chosen before the runs from the spec grid {3e-4, 1e-3, 3e-3}]."""
    warmup: float = 0.05
    """Warm-up fraction, then cosine decay to 10 % of the peak."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    seed: int = 0
    """Batch-order seed."""


@dataclass(frozen=True)
class RLConfig:
    """GRPO on the fidelity reward (defaults [R] except where marked)."""

    iterations: int = 30
    """Optimiser steps (one batch each)."""
    prompts: int = 8
    """B: prompts per batch (half changed, half unchanged/invalid)."""
    k: int = 8
    """K samples per prompt (TRL ``num_generations`` default [C])."""
    temperature: float = 1.0
    """Sampling temperature (TRL default [C])."""
    max_new: int = 384
    """L: new-byte cap; a capped completion usually fails strict parsing (intended)."""
    lr: float = 5e-5
    """AdamW learning rate (full parameters) [R]."""
    beta: float = 0.02
    """k3 KL coefficient to the frozen init [R] (TRL's default is 0)."""
    seed: int = 0
    """Prompt-order and sampling seed."""

    def __post_init__(self) -> None:
        if self.k < 2:
            raise ValueError(f"GRPO needs K >= 2 samples per prompt, got {self.k}")


def _torch():
    import torch

    return torch


def _lr_at(step: int, total: int, peak: float, warmup: float) -> float:
    w = max(1, int(total * warmup))
    if step < w:
        return peak * (step + 1) / w
    frac = (step - w) / max(1, total - w)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def new_model(layers: int, d: int, heads: int, max_len: int, seed: int, bpe: Any = None) -> TinyLM:
    """A fresh tiny model; with ``bpe`` (``lm.tiny.train_bpe``) it uses that tokenizer, else bytes."""
    if bpe is None:
        return TinyLM(TinyConfig(layers=layers, d=d, heads=heads, max_len=max_len, seed=seed),
                      spec=f"tiny:new?layers={layers}&d={d}&heads={heads}&max_len={max_len}&seed={seed}")
    cfg = TinyConfig(layers=layers, d=d, heads=heads, max_len=max_len, seed=seed, vocab_size=bpe.get_vocab_size(),
                     tokenizer="bpe")
    return TinyLM(cfg, spec=f"tiny:new-bpe{bpe.get_vocab_size()}?layers={layers}&d={d}&seed={seed}", bpe=bpe)


def _ids(lm: TinyLM) -> tuple[int, int, int]:
    """(BOS, EOS, PAD) of ``lm``'s tokenizer."""
    return int(getattr(lm, "bos_id", BOS)), int(lm.eos_token_ids[0]), int(lm.pad_id)


def _run(lm: TinyLM, batches, cfg: StageConfig) -> list[float]:
    torch = _torch()
    net = lm.model
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    losses = []
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step in range(cfg.steps):
            x, y, m = batches(step)
            for g in opt.param_groups:
                g["lr"] = _lr_at(step, cfg.steps, cfg.lr, cfg.warmup)
            logits, _ = net(x)
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                   reduction="none")
            loss = (ce * m.reshape(-1)).sum() / m.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        torch.set_num_threads(n)
        net.eval()
    return losses


def train_cpt(lm: TinyLM, documents: Sequence[str], cfg: StageConfig) -> list[float]:
    """Continual pre-training in place: random ``seq_len`` windows of the BOS…EOS-packed documents, loss on every
    byte. Returns per-step losses."""
    torch = _torch()
    seq = min(cfg.seq_len, lm.cfg.max_len - 1)
    bos, eos, _ = _ids(lm)
    stream = [t for d in documents for t in [bos, *lm.encode(d), eos]]
    if len(stream) < seq + 2:
        raise ValueError(f"train_cpt needs more than {seq + 2} tokens of text, got {len(stream)}")
    data = torch.tensor(stream)
    gen = torch.Generator().manual_seed(cfg.seed)

    def batches(_step):
        starts = torch.randint(0, len(stream) - seq - 1, (cfg.batch,), generator=gen)
        x = torch.stack([data[s: s + seq] for s in starts])
        y = torch.stack([data[s + 1: s + seq + 1] for s in starts])
        return x, y, torch.ones_like(y, dtype=torch.float32)

    return _run(lm, batches, cfg)


def encode_example(lm: TinyLM, ex: WMExample, max_len: int) -> tuple[list[int], int]:
    """(BOS + prompt + target + EOS ids, index of the first target id); the prompt is cut from the left when the
    whole would exceed ``max_len``."""
    bos, eos, _ = _ids(lm)
    p, t = lm.encode(ex.prompt), lm.encode(ex.target) + [eos]
    if len(t) + 2 > max_len:
        raise ValueError(f"target of {len(t)} tokens does not fit the context ({max_len})")
    p = p[max(0, len(p) + len(t) + 1 - max_len):]
    return [bos, *p, *t], 1 + len(p)


def train_sft(lm: TinyLM, examples: Sequence[WMExample], cfg: StageConfig) -> list[float]:
    """SFT in place: loss on the target bytes only; examples drawn in seeded shuffled epochs."""
    torch = _torch()
    if not examples:
        raise ValueError("train_sft: no examples")
    max_len = min(cfg.seq_len, lm.cfg.max_len)
    enc = [encode_example(lm, e, max_len) for e in examples]
    rng = np.random.default_rng(derive_seed(cfg.seed, "wm-sft"))
    order: list[int] = []

    def batches(_step):
        nonlocal order
        idx = []
        while len(idx) < cfg.batch:
            if not order:
                order = list(rng.permutation(len(enc)))
            idx.append(order.pop())
        L = max(len(enc[i][0]) for i in idx)
        pad = _ids(lm)[2]
        x = torch.full((len(idx), L - 1), pad, dtype=torch.long)
        y = torch.full((len(idx), L - 1), pad, dtype=torch.long)
        m = torch.zeros((len(idx), L - 1))
        for r, i in enumerate(idx):
            ids, start = enc[i]
            t = torch.tensor(ids)
            x[r, :len(ids) - 1], y[r, :len(ids) - 1] = t[:-1], t[1:]
            m[r, start - 1:len(ids) - 1] = 1.0
        return x, y, m

    return _run(lm, batches, cfg)


# ---------------------------------------------------------------------------------------------------------------
# GRPO

@dataclass
class RLLog:
    """Per-iteration means over the batch's completions."""

    reward: list[float] = field(default_factory=list)
    rule: list[float] = field(default_factory=list)
    judge: list[float] = field(default_factory=list)
    praise_full: list[float] = field(default_factory=list)
    praise_obs: list[float] = field(default_factory=list)
    parse_rate: list[float] = field(default_factory=list)
    length: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    dropped_groups: int = 0
    seconds: float = 0.0


def _token_logps(net, seqs: list[list[int]], starts: list[int], pad: int):
    """Per-sequence tensors of log π(token) for the completion tokens (positions ≥ start), with grad."""
    torch = _torch()
    L = max(len(s) for s in seqs)
    x = torch.full((len(seqs), L), pad, dtype=torch.long)
    for r, s in enumerate(seqs):
        x[r, :len(s)] = torch.tensor(s)
    logits, _ = net(x[:, :-1])
    logp = torch.log_softmax(logits.float(), -1).gather(2, x[:, 1:, None])[..., 0]
    mask = torch.zeros_like(logp)
    for r, (s, st) in enumerate(zip(seqs, starts)):
        mask[r, st - 1:len(s) - 1] = 1.0
    return logp, mask


def train_grpo(lm: TinyLM, prompts: Sequence[WMExample], reward: RewardFn, cfg: RLConfig) -> RLLog:
    """GRPO in place on ``lm`` (module docstring); the frozen init is the KL reference."""
    torch = _torch()
    ref = copy.deepcopy(lm.model).eval()
    net = lm.model
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=0.0)
    changed = [e for e in prompts if e.changed]
    still = [e for e in prompts if not e.changed]
    rng = np.random.default_rng(derive_seed(cfg.seed, "wm-grpo"))
    log = RLLog()
    t0 = time.perf_counter()
    n_threads = torch.get_num_threads()
    for it in range(cfg.iterations):
        half = cfg.prompts // 2
        batch = [changed[int(i)] for i in rng.integers(0, len(changed), half)] if changed else []
        batch += [still[int(i)] for i in rng.integers(0, len(still), cfg.prompts - len(batch))] if still else []
        gen = GenerateConfig(n=cfg.k, temperature=cfg.temperature, max_new_tokens=cfg.max_new,
                             seed=derive_seed(cfg.seed, "wm-grpo-sample", it))
        comps = lm.generate([e.prompt for e in batch], gen)
        seqs, starts, adv, stats = [], [], [], []
        for g, e in enumerate(batch):
            group = comps[g * cfg.k:(g + 1) * cfg.k]
            rs = [reward(e, c.text) for c in group]
            stats += rs
            R = np.array([r.total for r in rs])
            if R.std() == 0:
                log.dropped_groups += 1
                continue
            A = (R - R.mean()) / (R.std() + 1e-4)
            p = [_ids(lm)[0], *lm.encode(e.prompt)]
            for c, a in zip(group, A):
                toks = list(c.token_ids)
                seqs.append(p + toks)
                starts.append(len(p))
                adv.append(float(a))
        log.reward.append(float(np.mean([r.total for r in stats])))
        log.rule.append(float(np.mean([r.rule for r in stats])))
        log.judge.append(float(np.mean([r.judge for r in stats])))
        log.praise_full.append(float(np.mean([r.praise_full for r in stats])))
        log.praise_obs.append(float(np.mean([r.praise_obs for r in stats])))
        log.parse_rate.append(float(np.mean([r.parse_ok for r in stats])))
        log.length.append(float(np.mean([len(c.token_ids) for c in comps])))
        if not seqs:
            log.kl.append(0.0)
            continue
        torch.set_num_threads(1)
        net.train()
        try:
            logp, mask = _token_logps(net, seqs, starts, lm.pad_id)
            with torch.no_grad():
                ref_logp, _ = _token_logps(ref, seqs, starts, lm.pad_id)
            u = ref_logp - logp
            k3 = torch.exp(u) - u - 1
            A = torch.tensor(adv)[:, None]
            # μ = 1: ρ = π/π_old = 1 with gradient ∇log π, so the clipped surrogate reduces to A·ρ
            ratio = torch.exp(logp - logp.detach())
            obj = ratio * A - cfg.beta * k3
            loss = -(obj * mask).sum() / mask.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            log.kl.append(float((k3.detach() * mask).sum() / mask.sum().clamp(min=1)))
        finally:
            net.eval()
            torch.set_num_threads(n_threads)
    log.seconds = time.perf_counter() - t0
    return log
