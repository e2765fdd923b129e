"""Record and edit the residual stream of any white-box LM at named layers and positions, over ``add_hook``.

``record(lm, layers, positions)`` captures block outputs; ``intervene(lm, layer, edit, positions)`` replaces them.
Both are context managers and functions, not methods, so the ``WhiteBoxLM`` protocol and its fakes stay as they are;
they work on ``hf:`` and ``tiny:`` (anything with ``forward`` and ``add_hook``).

Layers are **block indices** as ``add_hook`` takes them: block ``b``'s output is ``forward(...,
hidden_states=True).hidden_states[b + 1]`` (entry 0 is the embeddings).

Positions are absolute token indices within each row's own sequence, left padding excluded (prompt = 0..P_i−1,
generated = P_i, P_i+1, …). While a manager is open, ``lm.forward`` is wrapped on the instance (restored on exit) so
that each call publishes a :class:`ForwardContext`: ``abs_pos`` [B, S] from ``position_ids`` (else cache length +
arange) and ``valid`` [B, S] from ``attention_mask``. The hooks read it, so positions are right in a prefill, a
left-padded batch, a decode step or a fork refeed alike; a hook that finds no context (a direct ``lm.model(...)``
call) raises. Prompt-relative specs (``last_prompt``, ``prompt``, ``generated``) need ``prompt_len``: one int for
every row, or one per row of each forward batch. ``generated`` edits the residual *at* generated tokens, so the first
generated token (predicted at P−1) is unaffected unless ``last_prompt`` or ``all`` is included.

With a KV cache every position is computed once per generation call, so an edit lands once per (row, position);
a fork's refeed recomputes one position and edits it again, replacing the cropped entry.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import numpy as np


@dataclass(frozen=True)
class Indices:
    """Explicit absolute positions per row of the forward batch: ``per_row[b]`` lists row b's positions."""

    per_row: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, per_row: Sequence[Sequence[int]]) -> Indices:
        return cls(tuple(tuple(int(i) for i in r) for r in per_row))


PositionSpec = Union[Literal["last_prompt", "prompt", "generated", "all"], Indices]
NAMED_POSITIONS = ("last_prompt", "prompt", "generated", "all")


@dataclass
class ForwardContext:
    """What one forward call covers: ``abs_pos`` [B, S] int64 and ``valid`` [B, S] bool (numpy)."""

    abs_pos: np.ndarray
    valid: np.ndarray


_CTX: contextvars.ContextVar[ForwardContext | None] = contextvars.ContextVar("agentmill_forward_ctx", default=None)


class PositionsUnknown(RuntimeError):
    """A hook fired outside a wrapped forward, or a prompt-relative spec lacks ``prompt_len``."""


def current_context() -> ForwardContext:
    ctx = _CTX.get()
    if ctx is None:
        raise PositionsUnknown("positions unknown: run the model through lm.forward / lm.generate inside "
                               "record(...) or intervene(...)")
    return ctx


def _context_for(lm: Any, input_ids: Any, cache: Any, attention_mask: Any, position_ids: Any) -> ForwardContext:
    ids = np.asarray(input_ids.detach().cpu() if hasattr(input_ids, "detach") else input_ids)
    if ids.ndim == 1:
        ids = ids[None]
    B, S = ids.shape
    if position_ids is not None:
        pos = np.asarray(position_ids.detach().cpu() if hasattr(position_ids, "detach") else position_ids)
        pos = np.broadcast_to(pos.reshape(-1, S) if pos.size else pos, (B, S)).astype(np.int64)
    else:
        past = 0 if cache is None else int(lm.cache_length(cache))
        pos = np.broadcast_to(np.arange(past, past + S), (B, S)).astype(np.int64)
    if attention_mask is not None:
        m = np.asarray(attention_mask.detach().cpu() if hasattr(attention_mask, "detach") else attention_mask)
        valid = m.reshape(B, -1)[:, -S:].astype(bool)
    else:
        valid = np.ones((B, S), dtype=bool)
    return ForwardContext(np.array(pos), valid)


_WRAP_DEPTH = "_agentmill_intervene_depth"


@contextlib.contextmanager
def _wrapped_forward(lm: Any) -> Iterator[None]:
    """Wrap ``lm.forward`` on the instance so every call publishes its :class:`ForwardContext` (re-entrant)."""
    depth = getattr(lm, _WRAP_DEPTH, 0)
    if depth == 0:
        inner = lm.forward

        def forward(input_ids: Any, cache: Any | None = None, **kw: Any) -> Any:
            token = _CTX.set(_context_for(lm, input_ids, cache, kw.get("attention_mask"), kw.get("position_ids")))
            try:
                return inner(input_ids, cache, **kw)
            finally:
                _CTX.reset(token)

        lm.forward = forward
    setattr(lm, _WRAP_DEPTH, depth + 1)
    try:
        yield
    finally:
        setattr(lm, _WRAP_DEPTH, depth)
        if depth == 0:
            del lm.forward
            delattr(lm, _WRAP_DEPTH)


def select(positions: PositionSpec, ctx: ForwardContext, prompt_len: int | Sequence[int] | None) -> np.ndarray:
    """Boolean mask [B, S] of the (row, position) pairs of this forward chunk that ``positions`` selects."""
    B, S = ctx.abs_pos.shape
    if isinstance(positions, Indices):
        if len(positions.per_row) != B:
            raise PositionsUnknown(f"Indices has {len(positions.per_row)} rows but the forward batch has {B}")
        want = np.zeros((B, S), dtype=bool)
        for b, idx in enumerate(positions.per_row):
            want[b] = np.isin(ctx.abs_pos[b], np.asarray(idx, dtype=np.int64))
        return want & ctx.valid
    if positions not in NAMED_POSITIONS:
        raise ValueError(f"unknown position spec {positions!r}; use one of {', '.join(NAMED_POSITIONS)} or Indices")
    if positions == "all":
        return ctx.valid.copy()
    if prompt_len is None:
        raise PositionsUnknown(f"position spec {positions!r} is relative to the prompt: pass prompt_len")
    P = np.asarray(prompt_len, dtype=np.int64)
    if P.ndim == 0:
        P = np.full(B, int(P))
    if P.shape != (B,):
        raise PositionsUnknown(f"prompt_len has {P.size} rows but the forward batch has {B}")
    P = P[:, None]
    m = {"last_prompt": ctx.abs_pos == P - 1, "prompt": ctx.abs_pos < P, "generated": ctx.abs_pos >= P}[positions]
    return m & ctx.valid


@dataclass
class Recording:
    """Captured states: ``rows[layer]`` is a list of (row, abs_pos, vector [d]) in the order computed; one forward
    call's rows are numbered within that call (``call`` counts calls)."""

    rows: dict[int, list[tuple[int, int, int, np.ndarray]]] = field(default_factory=dict)

    def get(self, layer: int, row: int, pos: int, *, call: int | None = None) -> np.ndarray:
        """The last captured state of (row, pos) at ``layer`` (of call ``call`` when given)."""
        hit = [v for c, r, p, v in self.rows.get(layer, []) if r == row and p == pos and (call is None or c == call)]
        if not hit:
            raise KeyError(f"no state recorded at layer {layer}, row {row}, position {pos}")
        return hit[-1]

    def stack(self, layer: int) -> np.ndarray:
        """Every captured state of ``layer`` stacked [n, d] in capture order."""
        return np.stack([v for _, _, _, v in self.rows.get(layer, [])])


@contextlib.contextmanager
def record(lm: Any, layers: Sequence[int], positions: PositionSpec = "all", *,
           prompt_len: int | Sequence[int] | None = None) -> Iterator[Recording]:
    """Capture block outputs at ``layers`` (block indices) and ``positions`` for every forward inside the block."""
    rec = Recording()
    calls = {"n": -1, "last": None}
    handles = []

    def hook(layer: int, hidden: Any) -> None:
        ctx = current_context()
        if calls["last"] is not ctx:
            calls["n"] += 1
            calls["last"] = ctx
        m = select(positions, ctx, prompt_len)
        rows, cols = np.nonzero(m)
        if rows.size:
            vals = hidden.detach()[rows, cols].float().cpu().numpy()
            out = rec.rows.setdefault(layer, [])
            for k in range(rows.size):
                out.append((calls["n"], int(rows[k]), int(ctx.abs_pos[rows[k], cols[k]]), vals[k]))
        return None

    with _wrapped_forward(lm):
        try:
            for layer in layers:
                handles.append(lm.add_hook(int(layer), hook))
            yield rec
        finally:
            for h in handles:
                h.remove()


Edit = Callable[[Any, tuple[np.ndarray, np.ndarray]], Any]


@contextlib.contextmanager
def intervene(lm: Any, layer: int, edit: Edit, positions: PositionSpec = "all", *,
              prompt_len: int | Sequence[int] | None = None) -> Iterator[None]:
    """Replace block ``layer``'s output at the selected positions by ``edit(h_sel [n, d], (rows, abs_pos))``
    (a tensor of the same shape) for every forward inside the block. Hooks are removed on exit, exceptions too;
    nested managers on one layer apply in entry order."""

    def hook(_layer: int, hidden: Any) -> Any:
        import torch

        ctx = current_context()
        m = select(positions, ctx, prompt_len)
        if not m.any():
            return None
        rows, cols = np.nonzero(m)
        out = hidden.clone()
        r, c = torch.as_tensor(rows), torch.as_tensor(cols)
        out[r, c] = edit(hidden[r, c], (rows, ctx.abs_pos[rows, cols])).to(hidden.dtype)
        return out

    with _wrapped_forward(lm):
        h = lm.add_hook(int(layer), hook)
        try:
            yield
        finally:
            h.remove()
