"""Branching from a shared prefix: the ``ForkableLM`` protocol and its white-box implementation.

A rollout *tree* samples many continuations of one prompt, each starting from some prefix of an earlier
continuation. A backend that can copy and crop its KV cache pays for a shared prefix once; one that cannot
re-encodes it (``recompute`` mode) and says so in its counters. Either way the same ``BranchRequest`` gives the
same tokens: every request draws its noise from ``np.random.default_rng([*tree_key, expansion_id])`` and picks
tokens by Gumbel-max (see :mod:`agentmill.lm.decoding`), so a branch is reproducible alone or in a batch.

Counters (all in tokens) [R]: ``gen`` = sampled tokens (an EOS counts: it cost a decode
step), ``prefill`` = prompt tokens encoded (once per tree), ``refeed`` = one per fork (the token before the
branch point is fed again to get the branch logits), ``recompute`` = prefix tokens re-encoded after a cache was
evicted, ``forward`` = every token that went through the model. With no eviction,
``forward == prefill + sum(fed tokens per continuation) + refeed`` exactly, where a continuation's fed tokens are
its new tokens minus the last one unless it ended on EOS (the last sampled token is never fed back).
"""

from __future__ import annotations

import re
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol, Sequence

import numpy as np

from agentmill.lm.base import LMError
from agentmill.lm.decoding import advance_batch

Finish = Literal["eos", "stop", "length"]


@dataclass
class TokenCounters:
    """Token and time accounting of one tree (or one expansion)."""

    gen_tokens: int = 0
    prefill_tokens: int = 0
    refeed_tokens: int = 0
    recompute_tokens: int = 0
    fed_tokens: int = 0          # decode-loop tokens fed back (new tokens that produced the next logits)
    forward_calls: int = 0
    forks: int = 0
    wall_seconds: float = 0.0

    @property
    def forward_tokens(self) -> int:
        return self.prefill_tokens + self.fed_tokens + self.refeed_tokens + self.recompute_tokens

    def add(self, other: "TokenCounters") -> "TokenCounters":
        for k in ("gen_tokens", "prefill_tokens", "refeed_tokens", "recompute_tokens", "fed_tokens",
                  "forward_calls", "forks", "wall_seconds"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        return self

    def to_dict(self) -> dict[str, float]:
        d = {k: getattr(self, k) for k in ("gen_tokens", "prefill_tokens", "refeed_tokens", "recompute_tokens",
                                           "fed_tokens", "forward_calls", "forks", "wall_seconds")}
        d["forward_tokens"] = self.forward_tokens
        return d


@dataclass(frozen=True)
class StopSpec:
    """When a continuation ends: an EOS id (always), a stop string or regex match in its decoded text, or a
    custom predicate on that text."""

    stop: tuple[str, ...] = ()
    stop_regex: str | None = None
    predicate: Callable[[str], bool] | None = None

    def hit(self, text: str) -> bool:
        if any(s in text for s in self.stop):
            return True
        if self.stop_regex and re.search(self.stop_regex, text[-2000:]):
            return True
        return bool(self.predicate and self.predicate(text))


@dataclass(frozen=True)
class BranchRequest:
    """Sample a continuation of the completion ``prefix_ids`` (the first ``pos`` tokens of leaf
    ``parent_leaf``; ``pos == 0`` and ``parent_leaf is None`` is a fresh sample from the prompt)."""

    parent_leaf: int | None
    pos: int
    prefix_ids: np.ndarray
    expansion_id: int
    max_new_tokens: int
    stop: StopSpec = field(default_factory=StopSpec)

    def __post_init__(self) -> None:
        if self.pos != len(self.prefix_ids):
            raise ValueError(f"BranchRequest: pos={self.pos} but prefix has {len(self.prefix_ids)} tokens")
        if (self.parent_leaf is None) != (self.pos == 0):
            raise ValueError("BranchRequest: a root request has pos 0 and no parent leaf, a fork has both")
        if self.max_new_tokens < 1:
            raise ValueError(f"BranchRequest: max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class Continuation:
    """The new tokens of one branch. ``logprobs``/``entropies`` are under the sampling (tempered) distribution;
    ``branch_entropy`` is the entropy at the branch position (== ``entropies[0]`` when a token was sampled)."""

    token_ids: np.ndarray       # int32 [n]
    logprobs: np.ndarray        # float32 [n]
    entropies: np.ndarray       # float32 [n]
    branch_entropy: float
    finish: Finish
    text: str = ""
    eos_logprob: float | None = None   # logprob of the EOS token when finish == "eos" (not in token_ids)


class ForkableLM(Protocol):
    """A sampler that grows one tree per prompt. ``expand`` decodes a wave of requests as one batch."""

    supports_prefix_sharing: bool

    def start_tree(self, prompt: Any, tree_key: tuple[int, ...]) -> Any: ...

    def expand(self, tree: Any, requests: Sequence[BranchRequest], temperature: float) -> list[Continuation]: ...

    def end_tree(self, tree: Any) -> TokenCounters: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def stream_rng(tree_key: Sequence[int], expansion_id: int) -> np.random.Generator:
    """The noise stream of one expansion: independent of batch composition and of other expansions."""
    return np.random.default_rng([*(int(k) for k in tree_key), int(expansion_id)])


def tempered_logp(logits: np.ndarray, temperature: float) -> np.ndarray:
    """float64 log-softmax of ``logits / temperature`` over the last axis."""
    if temperature <= 0:
        raise ValueError(f"tree sampling needs temperature > 0, got {temperature}")
    z = logits.astype(np.float64) / temperature
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def gumbel_pick(logp: np.ndarray, rng: np.random.Generator) -> tuple[int, float, float]:
    """Sample from a 1-D log-distribution by Gumbel-max; return (token, its logprob, entropy in nats)."""
    tok = int(np.argmax(logp - np.log(-np.log(rng.random(logp.size)))))
    p = np.exp(logp)
    return tok, float(logp[tok]), float(-(p * logp).sum())


# ------------------------------------------------------------------------------------------ white-box backend
@dataclass
class _Tree:
    key: tuple[int, ...]
    prompt_ids: list[int]
    root_cache: Any
    root_logits: np.ndarray
    leaf_tokens: dict[int, np.ndarray] = field(default_factory=dict)
    counters: TokenCounters = field(default_factory=TokenCounters)


class WhiteBoxForker:
    """``ForkableLM`` over any white-box LM of the lm layer (``hf:``, ``tiny:``, ``scripted:whitebox``).

    Each finished leaf keeps its KV cache (batch 1, prompt + completion minus the last token) in an LRU store of
    at most ``max_cache_bytes``; a fork copies its parent's cache, crops it to ``P + pos - 1`` and re-feeds token
    ``pos - 1`` (1 refeed token) to get the branch logits. A wave of requests is decoded as one left-padded batch
    (unequal cache lengths are padded with zero keys/values and masked). A fork whose parent cache was evicted, or
    every fork in ``mode="recompute"``, re-encodes prompt + prefix instead (counted in ``recompute_tokens``).
    """

    def __init__(self, lm: Any, *, mode: Literal["fork", "recompute"] = "fork",
                 max_cache_bytes: int = 1 << 30) -> None:
        for attr in ("forward", "fork_cache", "crop_cache", "render", "decode"):
            if not hasattr(lm, attr):
                raise LMError(f"tree rollouts need a white-box LM with {attr}(); {lm!r} is a black box "
                              "(use hf:, tiny: or scripted:whitebox)")
        if mode not in ("fork", "recompute"):
            raise ValueError(f"mode must be 'fork' or 'recompute', got {mode!r}")
        self.lm, self.mode, self.max_cache_bytes = lm, mode, int(max_cache_bytes)
        self.supports_prefix_sharing = mode == "fork"
        self._store: OrderedDict[tuple[tuple[int, ...], int], Any] = OrderedDict()
        self._store_bytes: dict[tuple[tuple[int, ...], int], int] = {}
        self._keep_ok: bool | None = None

    def decode(self, ids: Sequence[int]) -> str:
        return self.lm.decode(list(ids))

    # ------------------------------------------------------------------------------------------- tree life
    def start_tree(self, prompt: Any, tree_key: tuple[int, ...]) -> _Tree:
        import torch

        ids = list(prompt) if isinstance(prompt, (list, tuple, np.ndarray)) else self.lm.render(prompt)
        if not ids:
            raise LMError("start_tree: the prompt renders to no tokens")
        if len(ids) >= self.lm.max_positions:
            raise LMError(f"start_tree: prompt has {len(ids)} tokens, the model context is {self.lm.max_positions}")
        t0 = time.perf_counter()
        out = self._prefill(torch.tensor([ids]))
        tree = _Tree(tuple(int(k) for k in tree_key), [int(i) for i in ids], out.cache, out.logits[0, -1].numpy())
        tree.counters.prefill_tokens += len(ids)
        tree.counters.forward_calls += 1
        tree.counters.wall_seconds += time.perf_counter() - t0
        return tree

    def end_tree(self, tree: _Tree) -> TokenCounters:
        for key in [k for k in self._store if k[0] == tree.key]:
            self._drop(key)
        tree.root_cache = None
        return tree.counters

    def add_leaf(self, tree: _Tree, token_ids: Sequence[int]) -> int:
        """Register an externally sampled completion ``token_ids`` as a leaf of ``tree`` by one teacher-forced
        pass over all but its last token from the root cache (counted as ``prefill_tokens``), so ``expand`` can
        fork from any of its positions. Returns the leaf id. With ``mode="recompute"`` nothing is cached and
        forks re-encode as usual."""
        import torch

        ids = [int(t) for t in token_ids]
        P = len(tree.prompt_ids)
        if P + len(ids) > self.lm.max_positions:
            raise LMError(f"add_leaf: prompt + completion = {P + len(ids)} tokens exceed the model context "
                          f"({self.lm.max_positions})")
        t0 = time.perf_counter()
        leaf = len(tree.leaf_tokens)
        if self.mode == "fork":
            cache = self.lm.fork_cache(tree.root_cache)
            if len(ids) > 1:
                cache = self.lm.forward(torch.tensor([ids[:-1]]), cache).cache
                tree.counters.prefill_tokens += len(ids) - 1
                tree.counters.forward_calls += 1
            self._put(tree, leaf, cache)
        tree.leaf_tokens[leaf] = np.asarray(ids, dtype=np.int32)
        tree.counters.wall_seconds += time.perf_counter() - t0
        return leaf

    # ------------------------------------------------------------------------------------------- branching
    def expand(self, tree: _Tree, requests: Sequence[BranchRequest], temperature: float) -> list[Continuation]:
        """Decode ``requests`` as one batch; returns one continuation per request, in order."""
        import torch

        if not requests:
            return []
        t0 = time.perf_counter()
        starts = [self._branch_start(tree, r) for r in requests]     # (cache batch-1, logits at pos, length)
        width = max(s[2] for s in starts)
        cache = self._merge([s[0] for s in starts], [s[2] for s in starts], width)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for b, s in enumerate(starts):
            mask[b, width - s[2]:] = 1
        next_pos = torch.tensor([s[2] for s in starts], dtype=torch.long)
        logits = np.stack([s[1] for s in starts])
        P = len(tree.prompt_ids)
        budgets = [min(r.max_new_tokens, self.lm.max_positions - P - r.pos) for r in requests]
        rngs = [stream_rng(tree.key, r.expansion_id) for r in requests]
        toks: list[list[int]] = [[] for _ in requests]
        lps: list[list[float]] = [[] for _ in requests]
        ents: list[list[float]] = [[] for _ in requests]
        finish: list[Finish | None] = [None] * len(requests)
        branch_ent = [0.0] * len(requests)
        eos_lp: list[float | None] = [None] * len(requests)
        eos = set(getattr(self.lm, "eos_token_ids", ()) or ())
        active = list(range(len(requests)))
        row_cache: dict[int, Any] = {}
        while active:
            logp = tempered_logp(logits, temperature)
            step = []
            for k, r in enumerate(active):
                tok, lp, h = gumbel_pick(logp[k], rngs[r])
                tree.counters.gen_tokens += 1
                if not toks[r] and not finish[r]:
                    branch_ent[r] = h
                if tok in eos:
                    finish[r], eos_lp[r] = "eos", lp
                else:
                    toks[r].append(tok), lps[r].append(lp), ents[r].append(h)
                    if requests[r].stop.hit(self.lm.decode(toks[r])):
                        finish[r] = "stop"
                    elif len(toks[r]) >= budgets[r]:
                        finish[r] = "length"
                step.append(tok)
            # A row that ended keeps its cache (prompt + completion up to the token before its last) for forks.
            for k, r in enumerate(active):
                if finish[r] is not None:
                    row_cache[r] = self._extract_row(cache, k, int(mask[k].sum()), int(mask.shape[1]))
            state = advance_batch(self.lm, cache, mask, next_pos, step, active, finish)
            if state is None:
                break
            cache, logits, mask, next_pos, active = state
            tree.counters.fed_tokens += len(active)
            tree.counters.forward_calls += 1
        out = []
        for r, req in enumerate(requests):
            ids = np.asarray(toks[r], dtype=np.int32)
            full = np.concatenate([np.asarray(req.prefix_ids, dtype=np.int32), ids])
            out.append(Continuation(ids, np.asarray(lps[r], np.float32), np.asarray(ents[r], np.float32),
                                    float(branch_ent[r]), finish[r] or "length", self.lm.decode(ids), eos_lp[r]))
            leaf_cache = row_cache.get(r)
            if leaf_cache is not None:
                # The stored cache covers prompt + full[:-1] (EOS rows: all of full); keep the first P+len-1.
                keep_len = P + max(len(full) - 1, 0)
                if self.lm.cache_length(leaf_cache) > keep_len:
                    self.lm.crop_cache(leaf_cache, keep_len)
                self._put(tree, len(tree.leaf_tokens), leaf_cache)
            tree.leaf_tokens[len(tree.leaf_tokens)] = full
        tree.counters.wall_seconds += time.perf_counter() - t0
        return out

    def _branch_start(self, tree: _Tree, req: BranchRequest) -> tuple[Any, np.ndarray, int]:
        """Cache (batch 1) holding prompt + prefix[:pos-1] plus the logits at ``pos``, and its length P+pos."""
        import torch

        P = len(tree.prompt_ids)
        if req.pos == 0:
            return self.lm.fork_cache(tree.root_cache), tree.root_logits, P
        if req.parent_leaf not in tree.leaf_tokens:
            raise ValueError(f"fork from unknown leaf {req.parent_leaf}")
        parent = tree.leaf_tokens[req.parent_leaf]
        if req.pos >= len(parent) + 1 or not np.array_equal(parent[:req.pos], req.prefix_ids):
            raise ValueError("fork prefix does not match the parent leaf's tokens")
        tree.counters.forks += 1
        stored = self._get(tree, req.parent_leaf) if self.mode == "fork" else None
        if stored is not None and self.lm.cache_length(stored) >= P + req.pos - 1:
            cache = self.lm.crop_cache(self.lm.fork_cache(stored), P + req.pos - 1)
        else:
            # Recompute: re-encode prompt + prefix[:pos-1] (counted), then refeed as usual.
            head = tree.prompt_ids + [int(t) for t in req.prefix_ids[: req.pos - 1]]
            cache = self._prefill(torch.tensor([head])).cache
            tree.counters.recompute_tokens += len(head)
            tree.counters.forward_calls += 1
        fo = self.lm.forward(torch.tensor([[int(req.prefix_ids[req.pos - 1])]]), cache)
        tree.counters.refeed_tokens += 1
        tree.counters.forward_calls += 1
        return fo.cache, fo.logits[0, -1].numpy(), P + req.pos

    def _prefill(self, ids: Any) -> Any:
        """Forward over a prompt; only the last position's logits are needed (the LM head over every position is
        a sizeable share of a prefill), when the backend supports ``logits_to_keep``."""
        if self._keep_ok is None:
            import inspect

            self._keep_ok = "logits_to_keep" in inspect.signature(self.lm.forward).parameters
        return self.lm.forward(ids, logits_to_keep=1) if self._keep_ok else self.lm.forward(ids)

    # --------------------------------------------------------------------------------------- cache plumbing
    def _merge(self, caches: list[Any], lengths: list[int], width: int) -> Any:
        """One batch cache from batch-1 caches of unequal length, left-padded (zero KV, masked) to ``width``."""
        import torch

        if len(caches) == 1:
            return caches[0]
        parts = [_cache_parts(c) for c in caches]
        merged = []
        for j, (_, axis) in enumerate(parts[0][0]):
            rows = []
            for (tensors, _build), n in zip(parts, lengths):
                t = tensors[j][0]
                if width > n:
                    shape = list(t.shape)
                    shape[axis] = width - n
                    t = torch.cat([t.new_zeros(shape), t], axis)
                rows.append(t)
            merged.append(torch.cat(rows, 0))
        return parts[0][1](merged)

    def _extract_row(self, cache: Any, row: int, real: int, width: int) -> Any:
        """Batch-1 copy of one row's real (unpadded, i.e. last ``real``) positions."""
        tensors, build = _cache_parts(cache)
        out = []
        for t, axis in tensors:
            t = t[row: row + 1]
            out.append(t.narrow(axis, width - real, real).clone())
        return build(out)

    def _put(self, tree: _Tree, leaf: int, cache: Any) -> None:
        if self.mode != "fork":
            return
        nbytes = sum(t.numel() * t.element_size() for t, _ in _cache_parts(cache)[0])
        key = (tree.key, leaf)
        self._store[key], self._store_bytes[key] = cache, nbytes
        while sum(self._store_bytes.values()) > self.max_cache_bytes and len(self._store) > 1:
            self._drop(next(iter(self._store)))

    def _get(self, tree: _Tree, leaf: int) -> Any | None:
        key = (tree.key, leaf)
        if key in self._store:
            self._store.move_to_end(key)
            return self._store[key]
        return None

    def _drop(self, key: tuple[tuple[int, ...], int]) -> None:
        self._store.pop(key, None)
        self._store_bytes.pop(key, None)


def _cache_parts(cache: Any) -> tuple[list[tuple[Any, int]], Callable[[list[Any]], Any]]:
    """The tensors of a cache as (tensor [B, ...], time axis) plus a function rebuilding a cache from such
    tensors. Covers transformers ``DynamicCache`` (5.x ``layers`` and 4.x ``key_cache``), the ``tiny:`` cache and
    the ``scripted:whitebox`` cache."""
    name = type(cache).__name__
    if name == "ScriptedCache":
        return [(cache.emb, 1), (cache.keep, 1)], lambda ts: type(cache)(ts[0], ts[1])
    if name == "TinyCache":
        n = len(cache.keys)

        def build_tiny(ts: list[Any]) -> Any:
            out = type(cache)(n)
            out.keys, out.values = ts[0::2], ts[1::2]
            return out

        return [(t, 2) for kv in zip(cache.keys, cache.values) for t in kv], build_tiny
    if hasattr(cache, "layers"):
        pairs = [(layer.keys, layer.values) for layer in cache.layers]
    elif hasattr(cache, "key_cache"):
        pairs = list(zip(cache.key_cache, cache.value_cache))
    else:
        raise LMError(f"tree rollouts cannot split or merge a {name}; use recompute mode")

    def build_dynamic(ts: list[Any]) -> Any:
        from transformers import DynamicCache

        out = DynamicCache()
        for li in range(len(ts) // 2):
            out.update(ts[2 * li], ts[2 * li + 1], li)
        return out

    return [(t, 2) for kv in pairs for t in kv], build_dynamic


def warn_once(msg: str, _seen: set[str] = set()) -> None:  # noqa: B006 - deliberate process-wide memo
    if msg not in _seen:
        _seen.add(msg)
        warnings.warn(msg, stacklevel=3)
