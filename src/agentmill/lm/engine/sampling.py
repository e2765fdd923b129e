"""Logit warping and per-request sampling for the engine [R].

``warp`` applies temperature, top-k and top-p in that order (the vLLM order) and returns the distribution the
request actually samples from; speculative verification must use exactly this distribution, so it lives here once.
"""

from __future__ import annotations

from typing import Any


def warp(logits: Any, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Any:
    """Probabilities ``[rows, V]`` (float32) after temperature, top-k and top-p; temperature 0 gives one-hot argmax."""
    import torch

    logits = logits.float()
    if temperature == 0:
        out = torch.zeros_like(logits)
        out.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        return out
    z = logits / temperature
    if top_k and top_k < z.shape[-1]:
        kth = z.topk(top_k, -1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = z.softmax(-1)
    if top_p < 1.0:
        sp, si = probs.sort(-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the token that crosses it stays)
        drop = (sp.cumsum(-1) - sp) >= top_p
        sp = sp.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, si, sp)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_rows(logits: Any, params: Any, generators: list[Any]) -> list[int]:
    """One token per row from ``warp(logits, ...)``; a row's generator (or None) makes it reproducible."""
    import torch

    probs = warp(logits, params.temperature, params.top_k, params.top_p)
    if params.temperature == 0:
        return [int(t) for t in probs.argmax(-1)]
    return [int(torch.multinomial(probs[r], 1, generator=g)) for r, g in enumerate(generators)]
