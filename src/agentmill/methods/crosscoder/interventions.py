"""Steering, routing, ablation, transplant and mean-difference edits of a model's residual stream through a
crosscoder, as context managers over :func:`agentmill.lm.intervene.intervene` (explicit per-row positions, correct
under KV caching and left padding).

At the selected positions of layer L's output h (raw units) of model ``view`` (0 = A, 1 = B), with x = s·h and the
code f = enc(x) in inference mode and f′ the edited code:

- ``mode="delta"`` (default, error-preserving): h′ = h + Σ_i (f′_i − f_i) d_i^view / s_view — only the edited
  latents move; f′ = f leaves h exactly unchanged (the update is an exact 0, not a small number).
- ``mode="replace"``: h′ = dec_view(f′) / s_view — the reconstruction replaces h and its error is dropped (E175's
  "routing through the dictionary" [P]).

The crosscoder reads both views; which activations feed the other view is ``encode_from``: :class:`SelfOnly`
(the other view is its dataset mean, default, or zero), :class:`Joint` (the other model's activations on the same
tokens: E175's spillover patch [P]) or :class:`Shuffled` (the other view from a different prompt).

Since A-exclusive latents have d_i^B ≡ 0, an edit of A-exclusive latents decoded on B's side changes h_B by exactly
0 (:func:`delta_update`): steering the base with them is a no-op by construction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.methods.crosscoder.model import CrossCoder, require_torch

CodeEdit = Callable[[Any], Any]


def check_features(cc: CrossCoder, features: Sequence[int], block: str | None = None) -> list[int]:
    """``features`` as ints; raises when one is out of range or outside ``block`` (a_excl, b_excl, shared)."""
    out = [int(i) for i in features]
    for i in out:
        if not 0 <= i < cc.D:
            raise ValueError(f"feature {i} is out of range [0, {cc.D})")
    if block is not None:
        sl = cc.blocks()[block]
        bad = [i for i in out if not sl.start <= i < sl.stop]
        if bad:
            raise ValueError(f"features {bad} are outside the {block} block [{sl.start}, {sl.stop})")
    return out


def scale(features: Sequence[int], alpha: float) -> CodeEdit:
    """f′_i = α f_i for i in ``features`` (α = 1: no-op; α = 0: ablation; E175 steering [P])."""
    idx = list(features)

    def edit(f: Any) -> Any:
        g = f.clone()
        g[:, idx] = f[:, idx] * alpha
        return g
    return edit


def clamp(features: Sequence[int], value: float, *, only_if_active: bool = False) -> CodeEdit:
    """f′_i = ``value`` for i in ``features`` (unconditionally, or only where f_i > 0)."""
    idx = list(features)

    def edit(f: Any) -> Any:
        g = f.clone()
        if only_if_active:
            g[:, idx] = require_torch().where(f[:, idx] > 0, require_torch().full_like(f[:, idx], value), f[:, idx])
        else:
            g[:, idx] = value
        return g
    return edit


def identity(f: Any) -> Any:
    return f


def delta_update(cc: CrossCoder, f: Any, f_new: Any, view: int) -> Any:
    """Raw-unit change of model ``view``'s residual for a code edit f → f′: Σ_i (f′_i − f_i) d_i^view / s_view,
    summed only over the latents that changed (so an unchanged code gives an exact 0)."""
    torch = require_torch()
    diff = f_new - f
    changed = (diff != 0).any(0).nonzero().flatten()
    if changed.numel() == 0:
        return torch.zeros(f.shape[0], cc.d, dtype=f.dtype)
    w = cc.dec_weight()[changed, view]
    return (diff[:, changed] @ w) / cc.scales[view]


@dataclass(frozen=True)
class SelfOnly:
    """The other view is its dataset mean (``fill="mean"``, needs ``means`` (2, d) normalised) or zero."""

    fill: str = "mean"
    means: Any = None


@dataclass(frozen=True)
class Joint:
    """The other view from the other model on the same tokens: ``values[(row, abs_pos)]`` raw vectors (d,)."""

    values: Mapping[tuple[int, int], np.ndarray]


@dataclass(frozen=True)
class Shuffled:
    """The other view taken from a different prompt: a random row of ``pool`` (n, d) raw, seeded."""

    pool: np.ndarray
    seed: int = 0


EncodeFrom = SelfOnly | Joint | Shuffled


def _other_view(cc: CrossCoder, enc: EncodeFrom, view: int, n: int, where: tuple[np.ndarray, np.ndarray],
                rng: np.random.Generator) -> np.ndarray:
    other = 1 - view
    if isinstance(enc, SelfOnly):
        if enc.fill == "zero":
            return np.zeros((n, cc.d), np.float32)
        if enc.fill != "mean" or enc.means is None:
            raise ValueError("SelfOnly(fill='mean') needs means=(2, d) normalised view means; or use fill='zero'")
        return np.broadcast_to(np.asarray(enc.means, np.float32)[other], (n, cc.d)).copy()
    if isinstance(enc, Joint):
        rows, pos = where
        try:
            raw = np.stack([np.asarray(enc.values[(int(r), int(p))], np.float32) for r, p in zip(rows, pos)])
        except KeyError as e:
            raise ValueError(f"joint encoding has no source activation at (row, position) {e.args[0]}") from None
        return raw * cc.scales[other]
    if isinstance(enc, Shuffled):
        pick = rng.integers(0, len(enc.pool), size=n)
        return np.asarray(enc.pool, np.float32)[pick] * cc.scales[other]
    raise TypeError(f"encode_from must be SelfOnly, Joint or Shuffled, got {type(enc).__name__}")


def edited_residual(cc: CrossCoder, h: Any, view: int, code_edit: CodeEdit, *, mode: str = "delta",
                    encode_from: EncodeFrom = SelfOnly("zero"), where: tuple[np.ndarray, np.ndarray] | None = None,
                    rng: np.random.Generator | None = None) -> Any:
    """h′ (n, d) raw for model ``view``'s raw residuals ``h`` (n, d) under ``code_edit`` (module docstring)."""
    torch = require_torch()
    if mode not in ("delta", "replace"):
        raise ValueError(f"mode must be 'delta' or 'replace', got {mode!r}")
    h32 = h.detach().float()
    n = h32.shape[0]
    where = where if where is not None else (np.arange(n), np.zeros(n, np.int64))
    other = torch.as_tensor(_other_view(cc, encode_from, view, n, where, rng or np.random.default_rng(0)))
    mine = h32 * cc.scales[view]
    x = torch.stack([mine, other] if view == 0 else [other, mine], 1)
    with torch.no_grad():
        f = cc.encode(x)
        f_new = code_edit(f)
        if mode == "delta":
            return h32 + delta_update(cc, f, f_new, view)
        return cc.decode_to_residual(f_new, view)


@contextlib.contextmanager
def _edit_lm(lm: Any, layer: int, fn: Callable[[Any, tuple[np.ndarray, np.ndarray]], Any], positions: Any,
             prompt_len: Any) -> Iterator[None]:
    from agentmill.lm.intervene import intervene

    with intervene(lm, layer, fn, positions, prompt_len=prompt_len):
        yield


@contextlib.contextmanager
def steer(lm: Any, cc: CrossCoder, *, layer: int, view: int, features: Sequence[int], alpha: float | None = None,
          clamp_value: float | None = None, mode: str = "delta", positions: Any = "last_prompt",
          encode_from: EncodeFrom = SelfOnly("zero"), prompt_len: Any = None, block: str | None = None,
          seed: int = 0) -> Iterator[None]:
    """Scale (``alpha``) or clamp (``clamp_value``) ``features`` of model ``view`` at ``positions`` of block
    ``layer``'s output while the block is open."""
    feats = check_features(cc, features, block)
    if (alpha is None) == (clamp_value is None):
        raise ValueError("steer needs exactly one of alpha= or clamp_value=")
    code_edit = scale(feats, alpha) if alpha is not None else clamp(feats, float(clamp_value))  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)

    def fn(h: Any, where: tuple[np.ndarray, np.ndarray]) -> Any:
        return edited_residual(cc, h, view, code_edit, mode=mode, encode_from=encode_from, where=where, rng=rng)

    with _edit_lm(lm, layer, fn, positions, prompt_len):
        yield


@contextlib.contextmanager
def route(lm: Any, cc: CrossCoder, *, layer: int, view: int, positions: Any = "last_prompt",
          encode_from: EncodeFrom = SelfOnly("zero"), prompt_len: Any = None, seed: int = 0) -> Iterator[None]:
    """Replace model ``view``'s activation by its crosscoder reconstruction (``mode="replace"``, identity edit)."""
    rng = np.random.default_rng(seed)

    def fn(h: Any, where: tuple[np.ndarray, np.ndarray]) -> Any:
        return edited_residual(cc, h, view, identity, mode="replace", encode_from=encode_from, where=where, rng=rng)

    with _edit_lm(lm, layer, fn, positions, prompt_len):
        yield


@contextlib.contextmanager
def ablate(lm: Any, cc: CrossCoder, *, layer: int, view: int, features: Sequence[int], positions: Any = "all",
           encode_from: EncodeFrom = SelfOnly("zero"), prompt_len: Any = None) -> Iterator[None]:
    """Zero ``features`` (delta mode: the reconstruction error is kept)."""
    with steer(lm, cc, layer=layer, view=view, features=features, alpha=0.0, positions=positions,
               encode_from=encode_from, prompt_len=prompt_len):
        yield


@contextlib.contextmanager
def add_direction(lm: Any, *, layer: int, direction: Any, coef: float, positions: Any = "all",
                  prompt_len: Any = None) -> Iterator[None]:
    """h += coef · ``direction`` (raw units) at ``positions``: the mean-difference baseline, and the transplant of
    A's decoder directions into B (:func:`transplant_direction`)."""
    torch = require_torch()
    v = torch.as_tensor(np.asarray(direction, np.float32))

    def fn(h: Any, where: tuple[np.ndarray, np.ndarray]) -> Any:
        return h.float() + coef * v

    with _edit_lm(lm, layer, fn, positions, prompt_len):
        yield


def transplant_direction(cc: CrossCoder, features: Sequence[int], mu: Sequence[float]) -> np.ndarray:
    """Σ_i μ_i d_i^A / s_A (raw units of A): what :func:`add_direction` adds to B for a transplant [R]."""
    feats = check_features(cc, features)
    with require_torch().no_grad():
        w = cc.dec_weight()[feats, 0].numpy()
    return (np.asarray(mu, np.float32)[:, None] * w).sum(0) / cc.scales[0]
