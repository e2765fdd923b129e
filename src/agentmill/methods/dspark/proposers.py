"""Draft proposers. ``NgramProposer`` is prompt lookup (Saxena 2023; vLLM's ``ngram`` speculative method): find
the most recent earlier occurrence of the context's last n tokens and propose what followed it. Deterministic, so
its q is one-hot (``Proposal.q`` = None) and it carries no confidences."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class NgramProposer:
    """Longest match first, n from ``n_max`` down to ``n_min``; at most ``k`` tokens proposed."""

    n_max: int = 4
    n_min: int = 1
    k: int = 4
    deterministic: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.n_min <= self.n_max or self.k < 1:
            raise ValueError("need 1 <= n_min <= n_max and k >= 1")

    @property
    def max_len(self) -> int:
        return self.k

    def propose_one(self, history: Sequence[int], limit: int | None = None) -> list[int]:
        """Draft for one context (prompt + committed tokens); empty when nothing matches."""
        k = self.k if limit is None else min(self.k, limit)
        if k <= 0:
            return []
        h = list(history)
        for n in range(min(self.n_max, len(h) - 1), self.n_min - 1, -1):
            tail = h[-n:]
            # most recent earlier occurrence whose continuation exists
            for start in range(len(h) - n - 1, -1, -1):
                if h[start: start + n] == tail:
                    return h[start + n: start + n + k]
        return []


@dataclass
class DraftBlock:
    """One request's drafted block: target ids, the distributions they were drawn from (``q [γ, V]`` over the
    target vocabulary; None when deterministic, i.e. greedy), raw confidence logits and calibrated confidences."""

    tokens: list[int]
    q: Any | None
    conf_logits: np.ndarray | None
    conf: np.ndarray | None


class DSparkProposer:
    """Drafts with a trained ``DSparkDrafter`` (inference side; docs/methods/dspark.md).

    Per request it keeps, for every draft layer, the K/V of the context features of the positions the target has
    already run (prompt rows at prefill, then the anchor plus the accepted drafts of each round). Rejected rows
    are never appended, so the drafter needs no rollback. A block is drafted in one backbone forward; the Markov
    head then samples left to right, each position seeing the token drafted before it, and the confidence head
    scores each position from the same features (never from the token it scores: non-anticipation).
    """

    deterministic = False

    def __init__(self, drafter: Any, calibration: dict[str, np.ndarray] | None = None, *, seed: int = 0):
        self.d = drafter.eval()
        self.cal = {k: np.asarray(v, dtype=np.float64) for k, v in (calibration or {}).items()}
        self.seed = seed
        self._state: dict[int, dict[str, Any]] = {}

    @property
    def max_len(self) -> int:
        return self.d.cfg.block_size

    @property
    def layer_ids(self) -> tuple[int, ...]:
        return tuple(self.d.cfg.target_layer_ids)

    def temperatures(self, temperature: float) -> np.ndarray:
        """STS temperatures of the bucket nearest the request's sampling temperature (``greedy``, ``t0.7``, ``t1.0``)."""
        g = self.d.cfg.block_size
        if not self.cal:
            return np.ones(g)
        buckets = {"greedy": 0.0, "t0.7": 0.7, "t1.0": 1.0}
        have = [b for b in buckets if b in self.cal]
        if not have:
            return np.ones(g)
        best = min(have, key=lambda b: abs(buckets[b] - temperature))
        return self.cal[best][:g]

    # ------------------------------------------------------------------ per-request context
    def start(self, rid: int, taps: Any, seed: int | None = None) -> None:
        import torch

        self._state[rid] = {"k": [None] * len(self.d.layers), "v": [None] * len(self.d.layers), "n": 0,
                            "gen": torch.Generator().manual_seed(
                                ((seed if seed is not None else self.seed) * 7919 + 104729) % (1 << 63))}
        self.commit(rid, taps)

    def commit(self, rid: int, taps: Any) -> None:
        """Append the context features of the rows the target just committed (``taps [n, m·d]``)."""
        import torch

        st = self._state[rid]
        n = taps.shape[0]
        with torch.inference_mode():
            ctx = self.d.context(taps)
            pos = torch.arange(st["n"], st["n"] + n)
            for i, layer in enumerate(self.d.layers):
                k, v = layer.context_kv(ctx, pos)
                st["k"][i] = k if st["k"][i] is None else torch.cat([st["k"][i], k], 1)
                st["v"][i] = v if st["v"][i] is None else torch.cat([st["v"][i], v], 1)
        st["n"] += n

    def release(self, rid: int) -> None:
        self._state.pop(rid, None)

    # ------------------------------------------------------------------ drafting
    def propose(self, rids: Sequence[int], anchors: Sequence[int], temperatures: Sequence[float],
                limits: Sequence[int]) -> list[DraftBlock]:
        import torch
        import torch.nn.functional as F

        d, g = self.d, self.d.cfg.block_size
        R = len(rids)
        if R == 0:
            return []
        with torch.inference_mode():
            states = [self._state[r] for r in rids]
            P = torch.tensor([s["n"] for s in states])
            pos = P[:, None] + torch.arange(g)[None]
            h = d.block_input(torch.tensor(list(anchors), dtype=torch.long))
            cmax = int(P.max())
            mask = torch.zeros((R, 1, g, cmax + g), dtype=torch.bool)
            for j, s in enumerate(states):
                mask[j, :, :, : s["n"]] = True
                mask[j, :, :, cmax:] = True
            for i, layer in enumerate(d.layers):
                kc = torch.zeros((R, layer.nkv, cmax, layer.hd))
                vc = torch.zeros_like(kc)
                for j, s in enumerate(states):
                    kc[j, :, : s["n"]] = s["k"][i]
                    vc[j, :, : s["n"]] = s["v"][i]
                h = layer(h, pos, kc, vc, mask)
            hn = d.norm(h)
            base = F.linear(hn, d.lm_head)                                      # [R, g, N_d]
            blocks = []
            for j in range(R):
                T = float(temperatures[j])
                limit = min(int(limits[j]), g)
                temps = self.temperatures(T)
                prev = int(anchors[j])
                toks, qs, zs = [], [], []
                for k in range(limit):
                    logits, z = d.heads(hn[j, k], base[j, k], torch.tensor(prev))
                    if T <= 0:
                        x_d = int(logits.argmax())
                    else:
                        q = torch.softmax(logits.double() / T, -1)
                        x_d = int(torch.multinomial(q, 1, generator=states[j]["gen"]))
                        full = torch.zeros(d.t.vocab_size, dtype=torch.float64)
                        full[d.d2t] = q
                        qs.append(full)
                    prev = int(d.d2t[x_d])
                    toks.append(prev)
                    zs.append(float(z) if z is not None else np.nan)
                z_arr = np.asarray(zs, dtype=np.float64) if d.cfg.confidence_head else None
                conf = None if z_arr is None else 1.0 / (1.0 + np.exp(-z_arr / temps[:limit]))
                blocks.append(DraftBlock(toks, torch.stack(qs) if qs else None, z_arr, conf))
        return blocks
