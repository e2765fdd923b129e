"""Exact float64 output distributions of speculative decoding on toy models (claim T1, docs/methods/dspark.md).

A second-order Markov target over a tiny vocabulary and a block-parallel toy drafter with a Markov bias and
confidences that read x_{k−1} make every quantity of a round enumerable: all drafted blocks (V^γ), the policy's
verify length for each, and every accept/reject/replacement/bonus outcome. Recursing over rounds (memoised on the
committed prefix) gives the exact joint distribution of the first N committed tokens, which must equal the target's
own joint for every causal policy; an *anticipating* confidence (c_k computed from x_k itself) must not.

The verification rule is written out here in float64 exactly as ``rejection.verify`` applies it per draw
(acceptance min(1, p/q); replacement from norm(max(0, p − q)); bonus from the next row), so the enumeration tests the
rule and the scheduler together, independent of sampling noise.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np


def warp_probs(logits: np.ndarray, temperature: float, top_k: int = 0) -> np.ndarray:
    """Temperature / top-k warping in float64 (T = 0: one-hot at the argmax, lowest index on ties)."""
    if temperature <= 0:
        out = np.zeros_like(logits, dtype=np.float64)
        out[int(np.argmax(logits))] = 1.0
        return out
    z = logits.astype(np.float64) / temperature
    if top_k and top_k < len(z):
        cut = np.sort(z)[-top_k]
        z = np.where(z >= cut, z, -np.inf)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


@dataclass
class ToyMarkovLM:
    """p(x_t | x_{t−2}, x_{t−1}) from fixed random logits, warped by temperature and top-k."""

    V: int = 5
    seed: int = 0
    temperature: float = 1.0
    top_k: int = 0
    logits: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.logits = np.random.default_rng(self.seed).normal(0, 1.5, size=(self.V, self.V, self.V))

    def p(self, ctx: tuple[int, ...]) -> np.ndarray:
        a, b = (ctx[-2] if len(ctx) >= 2 else 0), (ctx[-1] if ctx else 0)
        return warp_probs(self.logits[a, b], self.temperature, self.top_k)

    def joint(self, prompt: tuple[int, ...], n: int) -> dict[tuple[int, ...], float]:
        out = {(): 1.0}
        for _ in range(n):
            nxt = {}
            for s, pr in out.items():
                p = self.p(prompt + s)
                for t in np.flatnonzero(p):
                    nxt[s + (int(t),)] = pr * float(p[t])
            out = nxt
        return out


@dataclass
class ToyDrafter:
    """Block-parallel draft distributions q_k(· | committed context, x_{k−1}) with a Markov bias, optional zeros
    (a reduced draft vocabulary), optional one-hot (deterministic) drafts, and confidences c_k that read x_{k−1}
    — or, for the negative control, x_k itself (``anticipating``)."""

    V: int = 5
    gamma: int = 3
    seed: int = 1
    zeros: tuple[int, ...] = ()
    one_hot: bool = False
    anticipating: bool = False
    confidence_values: tuple[float, ...] | None = None
    base: np.ndarray = field(init=False)
    bias: np.ndarray = field(init=False)
    conf_table: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.base = rng.normal(0, 1.0, size=(self.gamma, self.V, self.V))       # [k, last context token, v]
        self.bias = rng.normal(0, 1.0, size=(self.V, self.V))                  # Markov bias [x_{k−1}, v]
        if self.confidence_values is None:
            self.conf_table = rng.uniform(0.05, 0.95, size=(self.gamma, self.V))
        else:
            self.conf_table = rng.choice(self.confidence_values, size=(self.gamma, self.V))

    def q(self, k: int, ctx_last: int, prev: int) -> np.ndarray:
        z = self.base[k, ctx_last] + self.bias[prev]
        if self.one_hot:
            out = np.zeros(self.V)
            out[int(np.argmax(z))] = 1.0
            return out
        z = z.copy()
        z[list(self.zeros)] = -np.inf
        e = np.exp(z - z[np.isfinite(z)].max())
        return e / e.sum()

    def conf(self, k: int, prev: int, x: int) -> float:
        return float(self.conf_table[k, x if self.anticipating else prev])


def exact_output_distribution(target: ToyMarkovLM, drafter: ToyDrafter, prompt: tuple[int, ...], n_tokens: int,
                              lengths: Callable[[np.ndarray, int, tuple[int, ...]], int]) -> dict[tuple, float]:
    """Exact joint of the first ``n_tokens`` committed tokens. ``lengths(conf, avail, committed)`` is the policy's
    verify length for one request given the drafted block's step confidences."""
    V, g = target.V, drafter.gamma

    @lru_cache(maxsize=None)
    def completions(committed: tuple[int, ...]) -> tuple[tuple[tuple[int, ...], float], ...]:
        need = n_tokens - len(committed)
        if need <= 0:
            return (((), 1.0),)
        ctx = prompt + committed
        out: dict[tuple[int, ...], float] = {}
        avail = min(g, need - 1)                     # value-independent cap (max_tokens), as in the engine
        anchor = ctx[-1]
        for block in itertools.product(range(V), repeat=g):
            # probability the drafter drafts this block, and its distributions / confidences
            pr_block, qs, cs = 1.0, [], []
            prev = anchor
            for k, x in enumerate(block):
                qk = drafter.q(k, anchor, prev)
                pr_block *= qk[x]
                if pr_block == 0.0:
                    break
                qs.append(qk)
                cs.append(drafter.conf(k, prev, x))
                prev = x
            if pr_block == 0.0:
                continue
            ell = int(lengths(np.array([cs]), avail, committed)) if avail > 0 else 0
            # verification outcomes
            acc_pr, seq = 1.0, ()
            for k in range(ell + 1):
                p = target.p(ctx + seq)
                if k == ell:                                      # all accepted: bonus from p_{ℓ+1}
                    for z in np.flatnonzero(p):
                        _add(out, completions, committed, seq + (int(z),), pr_block * acc_pr * p[z])
                    break
                x, q = block[k], qs[k]
                a = min(1.0, p[x] / q[x])
                if a < 1.0:                                       # rejection: replacement from the residual
                    resid = np.maximum(p - q, 0.0)
                    mass = resid.sum()
                    dist = resid / mass if mass > 1e-12 else p
                    for z in np.flatnonzero(dist):
                        _add(out, completions, committed, seq + (int(z),), pr_block * acc_pr * (1 - a) * dist[z])
                acc_pr *= a
                if acc_pr == 0.0:
                    break
                seq = seq + (x,)
        return tuple(out.items())

    return {k: v for k, v in completions(())}


def _add(out: dict, completions: Callable, committed: tuple, new: tuple, pr: float) -> None:
    if pr == 0.0:
        return
    for tail, pt in completions(committed + new):
        full = new + tail
        out[full] = out.get(full, 0.0) + pr * pt


def max_abs_error(a: dict[tuple, float], b: dict[tuple, float], n: int) -> float:
    """Largest |a − b| over length-n prefixes (a's sequences are truncated to n tokens first)."""
    ta: dict[tuple, float] = {}
    for k, v in a.items():
        ta[k[:n]] = ta.get(k[:n], 0.0) + v
    keys = set(ta) | set(b)
    return max(abs(ta.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


def policy_lengths(policy: Any, stale: Callable[[tuple[int, ...]], np.ndarray] | None = None
                   ) -> Callable[[np.ndarray, int, tuple[int, ...]], int]:
    """Adapt a ``VerifyPolicy`` to the single-request enumeration (request id 0, no co-batched tokens). For
    ``dspark-async`` the stale survival vector is a function of the committed prefix (the "snapshot held in
    state"), which is information from before this round's draft."""
    from agentmill.methods.dspark.policies import DSparkAsync, schedule

    def f(conf: np.ndarray, avail: int, committed: tuple[int, ...]) -> int:
        if isinstance(policy, DSparkAsync):
            st = stale(committed) if stale is not None else np.full(conf.shape[1], 0.5)
            return int(schedule(conf, [avail], policy.sps, "dspark-async", stale_survival=st[None, :conf.shape[1]])
                       [0])
        return int(policy.lengths(conf, np.array([avail]), np.array([0]), 0)[0])

    return f
