"""Hidden states of rollouts at named trace positions and layers, from one teacher-forced pass on sampled ids.

Positions (resolved per row to absolute indices; the state at t is computed from tokens ≤ t and predicts t+1) [R]:
``prompt_last`` (last user-message token), ``think_open`` (last token of the opener — the prompt's last token, which
emits the first thinking token and has seen no reasoning), ``first_generated`` (first sampled thinking token),
``frac:φ`` (trace token ⌊φ·(T−1)⌋), ``think_close`` (last trace token before the closer), ``answer_first``,
``abs:i``. A position that does not exist for a row (no closer, trace too short) is a NaN row, never shifted.
Layers are ``hidden_states`` indices: 0 = embeddings, block b writes b + 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.first_token_probe.traces import CLOSE


class PositionError(ValueError):
    """An unknown position spec, or a trace marker absent where one is required."""


def char_offsets(lm: Any, ids: Sequence[int]) -> list[int]:
    """``offsets[k]`` = characters decoded from ``ids[:k]`` (incremental decoding; byte models: exact)."""
    out, prev = [0], ""
    for k in range(1, len(ids) + 1):
        prev = lm.decode(list(ids[:k]))
        out.append(len(prev))
    return out


def locate_positions(lm: Any, prompt_ids: Sequence[int], sampled_ids: Sequence[int], text: str,
                     specs: Sequence[str], prefill_len: int = 0) -> dict[str, int | None]:
    """Absolute indices (into prompt + sampled) of ``specs``. ``text`` is the decoded completion (with any forced
    prefill, whose ``prefill_len`` tokens sit at the end of ``prompt_ids``); trace length T counts tokens before
    the closer."""
    P = len(prompt_ids) - prefill_len
    offs = char_offsets(lm, sampled_ids)
    close_at = text.find(CLOSE.rstrip("\n"))  # "\n</think>": the newline belongs to the closer
    if close_at >= 0:
        pre_chars = len(text) - (offs[-1] if offs else 0)  # chars of the forced prefill
        # trace tokens = prefill tokens + sampled tokens ending at or before the closer's first char
        ends = [o + pre_chars for o in offs[1:]]
        T = prefill_len + sum(e <= close_at for e in ends)
    else:
        T = None
    N = len(prompt_ids) + len(sampled_ids)
    out: dict[str, int | None] = {}
    for s in specs:
        if s == "think_open":
            out[s] = P - 1
        elif s == "prompt_last":
            out[s] = P - 1 - len(lm.encode("\nAssistant: <think>\n"))
        elif s == "first_generated":
            out[s] = P if N > P else None
        elif s.startswith("frac:"):
            phi = float(s[5:])
            if not 0 <= phi <= 1:
                raise PositionError(f"frac position needs φ in [0, 1], got {s}")
            out[s] = None if not T else P + int(np.floor(phi * (T - 1)))
        elif s == "think_close":
            out[s] = None if not T else P + T - 1
        elif s == "answer_first":
            out[s] = None if T is None else P + T + len(lm.encode(CLOSE)) - 1
            if out[s] is not None and out[s] >= N:
                out[s] = None
        elif s.startswith("abs:"):
            i = int(s[4:])
            out[s] = i if 0 <= i < N else None
        else:
            raise PositionError(f"unknown position spec {s!r}: use think_open, prompt_last, first_generated, "
                                "frac:φ, think_close, answer_first or abs:i")
    return out


@dataclass
class ActivationSet:
    """``H`` [N, P, L, d] float32 (NaN where a position is missing), ``mask`` [N, P], token ids at each position
    ``tokens`` [N, P] (−1 when missing), and the resolved positions per row."""

    H: np.ndarray
    mask: np.ndarray
    tokens: np.ndarray
    positions: list[str]
    layers: list[int]
    index: list[dict[str, int | None]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plant:
    """A planted control signal: ``α·s_i·u`` added at ``position`` to ``hidden_states[layer]`` (the output of
    block layer − 1), with α = κ·σ_u, σ_u the std of ⟨h, u⟩ there on the same batch."""

    layer: int
    position: str
    direction: np.ndarray
    kappa: float
    signs: np.ndarray


def capture(lm: Any, rollouts: Sequence[Any], positions: Sequence[str], layers: Sequence[int] | str = "all", *,
            batch_size: int = 16, plant: Plant | None = None, prompt_only: bool = False) -> ActivationSet:
    """One teacher-forced forward per batch (left padding, explicit ``position_ids``) over prompt + sampled ids
    (prompt only with ``prompt_only``), gathering the requested (position, layer) states."""
    import torch

    L_all = lm.num_layers + 1
    lay = list(range(L_all)) if layers == "all" else [int(x) for x in layers]
    if any(not 0 <= li < L_all for li in lay):
        raise PositionError(f"layer outside 0..{L_all - 1}: {lay}")
    N, P = len(rollouts), len(positions)
    H = np.full((N, P, len(lay), lm.hidden_size), np.nan, dtype=np.float32)
    toks = np.full((N, P), -1, dtype=np.int64)
    index = []
    seqs = []
    for r in rollouts:
        pre = len(lm.encode(r.prefill)) if r.prefill else 0
        idx = locate_positions(lm, r.prompt_ids, [] if prompt_only else r.sampled_ids, r.text, positions, pre)
        index.append(idx)
        seqs.append(list(r.prompt_ids) + ([] if prompt_only else list(r.sampled_ids)))
    alpha = None
    if plant is not None:
        # σ_u on the same rows without the plant, then the planted pass
        base = capture(lm, rollouts, [plant.position], [plant.layer], batch_size=batch_size, prompt_only=prompt_only)
        proj = base.H[:, 0, 0] @ plant.direction
        alpha = plant.kappa * float(np.nanstd(proj))
    for s in range(0, N, batch_size):
        rows = list(range(s, min(N, s + batch_size)))
        width = max(len(seqs[i]) for i in rows)
        ids = torch.full((len(rows), width), getattr(lm, "pad_id", 0) or 0, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, i in enumerate(rows):
            n = len(seqs[i])
            ids[b, width - n:] = torch.tensor(seqs[i])
            mask[b, width - n:] = 1
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        if plant is not None:
            from agentmill.lm.intervene import Indices, intervene

            plant_at = [[index[i][plant.position]] if index[i][plant.position] is not None else [] for i in rows]
            u = torch.as_tensor(plant.direction, dtype=torch.float32)
            sg = torch.as_tensor(plant.signs[rows], dtype=torch.float32)

            def edit(h: Any, where: tuple[np.ndarray, np.ndarray], sg=sg, u=u) -> Any:
                return h + alpha * sg[torch.as_tensor(where[0])][:, None] * u[None]

            from agentmill.lm.intervene import record

            # transformers may record hidden_states with its own hooks registered before ours, so the planted
            # layer's entry would miss the edit: read that layer through a record hook registered after it
            with intervene(lm, plant.layer - 1, edit, Indices.of(plant_at)):
                with record(lm, [plant.layer - 1], "all") as rec:
                    fo = lm.forward(ids, attention_mask=mask, position_ids=pos, hidden_states=True)
        else:
            fo = lm.forward(ids, attention_mask=mask, position_ids=pos, hidden_states=True)
        hs = torch.stack([fo.hidden_states[li] for li in lay], 2).float().numpy()  # [B, T, L, d]
        if plant is not None and plant.layer in lay:
            j = lay.index(plant.layer)
            for row, p_abs, v in ((r, p_, v_) for _, r, p_, v_ in rec.rows[plant.layer - 1]):
                hs[row, width - len(seqs[rows[row]]) + p_abs, j] = v
        for b, i in enumerate(rows):
            off = width - len(seqs[i])
            for p, spec in enumerate(positions):
                a = index[i][spec]
                if a is not None and a < len(seqs[i]):
                    H[i, p] = hs[b, off + a]
                    toks[i, p] = seqs[i][a]
    m = ~np.isnan(H[:, :, 0, 0])
    meta = {"model": getattr(lm, "spec", "?"), "dtype": "float32", "plant": None if plant is None else
            {"layer": plant.layer, "position": plant.position, "kappa": plant.kappa, "alpha": alpha}}
    return ActivationSet(H, m, toks, list(positions), lay, index, meta)
