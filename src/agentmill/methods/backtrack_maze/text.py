"""The text maze: SFT of a language model on golden maze steps, and P(back) probes (E163-R5L; text layout [R]).

A state is rendered as one line after a short header, e.g.

    You are walking a maze of 4 arms, each 4 steps deep; one arm ends at the goal, the others at dead ends.
    depth 2 of 4, last move back. Moves: F1 F2, B. Move:

and a move is a short continuation: `` F1`` … `` FL`` (forward edges), `` B`` (back), `` A1`` … `` AW`` (arms, at the
hub). P(B | context) is the next-token probability of the first token of `` B``, renormalised over the first tokens
of the legal moves.

SFT data are the steps of golden shortest paths (hub -> goal arm, then forward edges at forward-facing depths),
so backward-facing contexts never appear as inputs. In a tabular policy that means their gradient is exactly 0;
in an LM the parameters are shared, and cross-entropy pushes down every non-target token, `` B`` included, in
every context that looks like a trained one [R]. The probe measures the net effect.

Works with any white-box backend that exposes a torch module as ``lm.model``: ``hf:`` (transformers) and
``tiny:`` (this project's byte-level transformer, used by the unit tests). torch is imported lazily.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.envs.pathstar import FWD, PathStarMultigraph

HEADERS = (
    "You are walking a maze of {W} arms, each {K} steps deep; one arm ends at the goal, the others at dead ends.",
    "Maze: {W} corridors of length {K}. Only one corridor reaches the exit; the rest are dead ends.",
    "Find the exit. There are {W} paths from the start, each {K} steps long, and only one of them is open.",
    "Navigation task: {W} branches of depth {K}, a single branch leads to the target.",
)
"""Header paraphrases; SFT samples one per example and the probe averages over all of them [R]."""


def state_line(env: PathStarMultigraph, depth: int, facing: int) -> str:
    """The [R] state line (depth >= 1), or the hub line (depth 0)."""
    if depth == 0:
        return f"at the start. Moves: {' '.join(f'A{i + 1}' for i in range(env.W))}. Move:"
    if not 1 <= depth <= env.K:
        raise ValueError(f"depth must be in [0, {env.K}], got {depth}")
    moves = " ".join(f"F{i + 1}" for i in range(env.L))
    return f"depth {depth} of {env.K}, last move {'forward' if facing == FWD else 'back'}. Moves: {moves}, B. Move:"


def context(env: PathStarMultigraph, depth: int, facing: int, header: int = 0) -> str:
    return HEADERS[header].format(W=env.W, K=env.K) + "\n" + state_line(env, depth, facing)


def move_text(env: PathStarMultigraph, depth: int, action: int) -> str:
    if depth == 0:
        return f" A{action + 1}"
    return " B" if action == env.back else f" F{action + 1}"


def golden_steps(env: PathStarMultigraph, rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    """``n`` (context, target move) pairs drawn uniformly from the K steps of random golden paths."""
    out = []
    for _ in range(n):
        goal = int(rng.integers(env.W))
        path = env.golden_path(goal, rng.integers(env.L, size=env.K - 1))
        obs, action = path[int(rng.integers(len(path)))]
        out.append((context(env, obs.depth, obs.facing, int(rng.integers(len(HEADERS)))),
                    move_text(env, obs.depth, action)))
    return out


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("the text maze needs torch: pip install 'agentmill[hf]'") from e
    return torch


def _module(lm: Any) -> Any:
    model = getattr(lm, "model", None)
    if model is None or not hasattr(model, "parameters"):
        raise TypeError(f"{lm!r} exposes no torch module as .model; the text maze needs an hf: or tiny: backend")
    return model


def _logits(lm: Any, model: Any, ids: Any) -> Any:
    """Logits [B, T, V] of ``model`` (a copy of ``lm.model``) on right-padded ``ids``; causal attention means
    padding after a sequence never changes its logits."""
    out = model(input_ids=ids) if hasattr(lm, "tokenizer") else model(ids)
    return out.logits if hasattr(out, "logits") else out[0]


def p_back(lm: Any, model: Any, env: PathStarMultigraph, facing: int) -> np.ndarray:
    """P(B | context) for every depth 1..K-1 and header: float64 [K-1, len(HEADERS)].

    Each legal move's probability is the product of its tokens' probabilities after the context (a move may span
    several tokens, e.g. a space and a letter under a byte tokenizer); P(B) is renormalised over the L+1 moves.
    """
    torch = _torch()
    moves = [move_text(env, 1, a) for a in range(env.L + 1)]
    rows, spans = [], []
    for j in range(1, env.K):
        for h in range(len(HEADERS)):
            p = lm.render(context(env, j, facing, h))
            for m in moves:
                mt = lm.encode(m)
                rows.append(p + mt)
                spans.append((len(p), len(mt)))
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [lm.pad_id] * (T - len(r)) for r in rows], dtype=torch.long)
    model.eval()
    logp = np.zeros(len(rows))
    with torch.no_grad():
        for s in range(0, len(rows), 16):
            logits = _logits(lm, model, ids[s: s + 16])
            for i in range(logits.shape[0]):
                start, n = spans[s + i]
                tok = ids[s + i, start: start + n]
                # only the n positions that predict the move: a float64 softmax over every position of the chunk
                # ([16, T, V] doubles, ~0.5 GB for SmolLM2) cost more than the forward pass
                lp = torch.log_softmax(logits[i, start - 1: start - 1 + n].double(), dim=-1)
                logp[s + i] = float(lp.gather(1, tok[:, None]).sum())
    logp = logp.reshape(env.K - 1, len(HEADERS), env.L + 1)
    probs = np.exp(logp - logp.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return probs[..., env.L]


@dataclass
class TextSFTLog:
    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    params_moved: float = 0.0
    """Largest absolute change of any parameter (training must move parameters)."""


def train_text_sft(lm: Any, env: PathStarMultigraph, *, steps: int, lr: float, batch: int, seed: int,
                   weight_decay: float = 0.0) -> tuple[Any, TextSFTLog]:
    """Full-parameter AdamW SFT of a *copy* of ``lm.model`` on golden steps (loss on the move tokens only).

    The loaded model is left untouched (other experiments in the same process share it). Returns the trained copy.
    """
    torch = _torch()
    if steps < 1 or batch < 1 or not lr > 0:
        raise ValueError(f"steps, batch and lr must be positive, got {steps}, {batch}, {lr}")
    model = copy.deepcopy(_module(lm))
    model.train()
    before = [p.detach().clone() for p in model.parameters()]
    try:  # the fused CPU kernel: ~0.3 s per step for 135M parameters against 4-16 s for the per-tensor loop
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    rng = np.random.default_rng(seed)
    log = TextSFTLog()
    t0 = time.perf_counter()
    for _ in range(steps):
        pairs = golden_steps(env, rng, batch)
        rows, tgt = [], []
        for ctx, move in pairs:
            p, m = lm.render(ctx), lm.encode(move)
            rows.append(p + m)
            tgt.append((len(p), len(m)))
        T = max(len(r) for r in rows)
        ids = torch.tensor([r + [lm.pad_id] * (T - len(r)) for r in rows], dtype=torch.long)
        labels = torch.full_like(ids, -100)
        for i, (start, n) in enumerate(tgt):
            labels[i, start: start + n] = ids[i, start: start + n]
        logits = _logits(lm, model, ids).float()
        # token t is predicted from position t-1
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 labels[:, 1:].reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.losses.append(float(loss.detach()))
        log.tokens += int(sum(len(r) for r in rows))
    log.seconds = time.perf_counter() - t0
    log.params_moved = float(max((p.detach() - q).abs().max() for p, q in zip(model.parameters(), before)))
    model.eval()
    return model, log


def base_model(lm: Any) -> Any:
    """The loaded model itself (read-only use: probes before training)."""
    return _module(lm)


__all__ = ["HEADERS", "state_line", "context", "move_text", "golden_steps", "p_back", "train_text_sft",
           "TextSFTLog", "base_model"]
