"""Segment scoring: the log-probability of every token of a text that is a concatenation of segments.

A scorer such as the progress advantage (E173, arXiv:2606.26080) needs, for one whole episode
``[prompt, action_1, observation_1, action_2, ...]``, the log-prob of each action token given everything before
it, from one forward pass per model. :func:`score_segments` returns them per segment, so the caller slices out
the spans it cares about.

Rules (progress_advantage README, deviations 2 and 8, and Caveats):

- Text segments are tokenized **separately** and concatenated, so segment boundaries are token boundaries (as at
  generation time, where each action was decoded after the prompt). Token-id segments (recorded at rollout time)
  are used as they are, which is preferred.
- A BOS token is prepended when the model has one and the sequence does not already start with it, so that the
  first real token is scored too; a model without BOS leaves the first token unscored (NaN).
- Log-softmax is taken in float32 over the model's full vocabulary, whatever the model's dtype.
- Too long for the model: ``truncate="error"`` raises; ``"left"`` drops the oldest tokens (keeping BOS), marks
  them NaN and counts them in ``n_truncated_left`` — never the silent 0.0 of the paper's official scorer.
- Batched scoring right-pads with attention masks; batched and one-by-one results agree within 1e-5.

Backends: every torch white box (``hf:``, ``tiny:``, ``scripted:whitebox``) through one forward pass; any object
with a ``score_token_ids`` method (the canned :class:`agentmill.lm.scripted.ScriptedScoringLM`, and endpoints
that return prompt log-probs); anything else raises :class:`CapabilityError`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentmill.lm.base import LMError

Segments = Sequence[str] | Sequence[Sequence[int]]
"""A scored sequence: all text segments or all token-id segments, concatenated in order."""


class CapabilityError(LMError):
    """The backend cannot score given text (e.g. an endpoint that returns no prompt log-probs)."""


@dataclass(frozen=True)
class SegmentScores:
    """Per-segment token scores of one sequence.

    ``token_logprobs[i]`` (float32 from model backends; float64 if the backend gives it; shape (n_i,)) holds log p(token
    | all earlier tokens) for the n_i tokens of segment i; NaN marks a token that has no score (dropped by left
    truncation, or the very first token of a model without BOS). ``token_ids[i]`` (int64, (n_i,)) are the tokens.
    ``topk_mean[i]`` (float32, (n_i,)) is the mean of the k largest log-probs of the predictive distribution at each of
    those positions (the Self-Certainty/DeepConf baselines' confidence; k = ``top_k``), or None when ``top_k == 0``.
    ``n_truncated_left`` counts dropped tokens.
    """

    token_logprobs: list[np.ndarray]
    token_ids: list[np.ndarray]
    topk_mean: list[np.ndarray] | None
    n_truncated_left: int

    def __len__(self) -> int:
        return len(self.token_logprobs)


# ------------------------------------------------------------------------------------------------ tokenization


def _is_text(segments: Segments) -> bool:
    kinds = {isinstance(s, str) for s in segments}
    if len(kinds) > 1:
        raise TypeError("segments must be all str or all token-id sequences, not a mix")
    return kinds == {True}


def tokenize_segments(lm: Any, segments: Segments) -> list[list[int]]:
    """Token ids of each segment: ``lm.encode`` per text segment (no special tokens added), or the ids given."""
    if len(segments) == 0:
        raise ValueError("score_segments: no segments")
    if _is_text(segments):
        if not hasattr(lm, "encode"):
            raise CapabilityError(f"{getattr(lm, 'spec', type(lm).__name__)!r} has no tokenizer (encode); pass "
                                  "token ids or use a white-box backend")
        return [list(lm.encode(s)) for s in segments]  # type: ignore[arg-type]
    out = []
    for i, s in enumerate(segments):
        ids = [int(x) for x in s]
        if any(x < 0 for x in ids):
            raise ValueError(f"segment {i} holds a negative token id")
        out.append(ids)
    return out


def bos_id(lm: Any) -> int | None:
    """The model's beginning-of-sequence id, or None. Looks at ``lm.bos_id``, then a transformers tokenizer's
    ``bos_token_id``, then the first token ``render("")`` produces when it is a special token."""
    if getattr(lm, "bos_id", None) is not None:
        return int(lm.bos_id)
    tok = getattr(lm, "tokenizer", None)
    if tok is not None:
        b = getattr(tok, "bos_token_id", None)
        return None if b is None else int(b)
    from agentmill.lm import scripted, tiny  # local: both are light to import (torch loads lazily)

    if isinstance(lm, tiny.TinyLM):
        return tiny.BOS
    if isinstance(lm, scripted.ScriptedWhiteBoxLM):
        return scripted.BOS_ID
    return None


def tokenizer_fingerprint(lm: Any) -> str:
    """A short hash that is equal for two models iff they tokenize (and template) text the same way.

    transformers: the vocabulary, the special tokens and the chat template; other backends: their class and their
    own ``tokenizer_fingerprint()`` when they define one. Two models that differ here cannot be compared token by
    token [R].
    """
    own = getattr(lm, "tokenizer_fingerprint", None)
    if callable(own):
        return str(own())
    tok = getattr(lm, "tokenizer", None)
    if tok is not None:
        payload = {
            "vocab": sorted(tok.get_vocab().items()),
            "special": sorted(str(x) for x in getattr(tok, "all_special_tokens", [])),
            "chat_template": getattr(tok, "chat_template", None),
            "bos": getattr(tok, "bos_token_id", None),
        }
    else:
        from agentmill.lm import scripted, tiny

        if isinstance(lm, tiny.TinyLM):
            payload = {"kind": "tiny-bytes", "vocab": tiny.VOCAB}
        elif isinstance(lm, scripted.ScriptedWhiteBoxLM):
            payload = {"kind": "scripted-whitebox", "alphabet": scripted.ALPHABET}
        else:
            payload = {"kind": type(lm).__qualname__}
    return hashlib.sha256(json.dumps(payload, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ scoring


def _max_len(lm: Any, max_len: int | None) -> int | None:
    if max_len is not None:
        if max_len < 2:
            raise ValueError(f"max_len must be >= 2, got {max_len}")
        return max_len
    m = getattr(lm, "max_positions", None)
    return int(m) if m else None


def _prepare(lm: Any, segments: Segments, truncate: str, max_len: int | None,
             ) -> tuple[list[list[int]], list[int], int, int]:
    """(per-segment ids, the sequence fed to the model, offset of the first segment token in it, n dropped)."""
    if truncate not in ("error", "left"):
        raise ValueError(f"truncate must be 'error' or 'left', got {truncate!r}")
    seg_ids = tokenize_segments(lm, segments)
    flat = [t for s in seg_ids for t in s]
    if not flat:
        raise ValueError("score_segments: the segments hold no tokens")
    b = bos_id(lm)
    prefix = [b] if b is not None and flat[0] != b else []
    limit = _max_len(lm, max_len)
    dropped = 0
    if limit is not None and len(prefix) + len(flat) > limit:
        need = len(prefix) + len(flat)
        if truncate == "error":
            raise ValueError(f"score_segments: the sequence has {need} tokens, the model context is {limit}; pass "
                             "truncate='left' to drop the oldest tokens (they are then reported as missing)")
        keep_bos = [b] if b is not None else []
        dropped = len(flat) - (limit - len(keep_bos))
        return seg_ids, keep_bos + flat[dropped:], len(keep_bos) - dropped, dropped
    return seg_ids, prefix + flat, len(prefix), 0


def _split(seg_ids: list[list[int]], fed_lp: np.ndarray, fed_topk: np.ndarray | None, offset: int,
           ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Map scores over the fed sequence back to segment tokens. Token j of the flat sequence sits at fed position
    j + offset (negative: dropped). Position 0 of the fed sequence has no context, hence no score."""
    n = sum(len(s) for s in seg_ids)
    pos = np.arange(n) + offset
    ok = (pos >= 1) & (pos < fed_lp.size)
    lp = np.full(n, np.nan, dtype=fed_lp.dtype)
    lp[ok] = fed_lp[pos[ok]]
    tk = None
    if fed_topk is not None:
        tk = np.full(n, np.nan, dtype=fed_topk.dtype)
        tk[ok] = fed_topk[pos[ok]]
    bounds = np.cumsum([0] + [len(s) for s in seg_ids])
    lps = [lp[bounds[i]:bounds[i + 1]] for i in range(len(seg_ids))]
    tks = None if tk is None else [tk[bounds[i]:bounds[i + 1]] for i in range(len(seg_ids))]
    return lps, tks


def _torch_score(lm: Any, seqs: list[list[int]], top_k: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """One right-padded forward over ``seqs``; per sequence, log p(x_t | x_<t) at t = 1..T−1 (index t; index 0 is
    NaN) and the top-k mean log-prob at each position, both float32."""
    import torch

    lengths = [len(s) for s in seqs]
    T = max(lengths)
    pad = int(getattr(lm, "pad_id", 0) or 0)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[r, : len(s)] = 1
    model = getattr(lm, "model", None)
    if model is not None and getattr(model, "training", False):
        raise LMError(f"{getattr(lm, 'spec', '?')}: the model is in training mode (dropout on); call .eval() before "
                      "scoring")
    logits = lm.forward(ids, attention_mask=mask).logits
    out = []
    for r, n in enumerate(lengths):
        lg = logits[r, : n - 1].float()
        logp = torch.log_softmax(lg, dim=-1)
        lp = np.full(n, np.nan, dtype=np.float32)
        lp[1:] = logp.gather(1, ids[r, 1:n, None])[:, 0].numpy()
        tk = None
        if top_k:
            tk = np.full(n, np.nan, dtype=np.float32)
            tk[1:] = logp.topk(min(top_k, logp.shape[-1]), dim=-1).values.mean(-1).numpy()
        out.append((lp, tk))
    return out


def _backend_score(lm: Any, seqs: list[list[int]], top_k: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
    native = getattr(lm, "score_token_ids", None)
    if callable(native):
        return native(seqs, top_k=top_k)
    if callable(getattr(lm, "forward", None)):
        return _torch_score(lm, seqs, top_k)
    raise CapabilityError(f"{getattr(lm, 'spec', type(lm).__name__)!r} cannot score given text: it is a black box "
                          "without prompt log-probs (use hf:, tiny: or an endpoint that returns prompt_logprobs)")


def _float(x: Any) -> np.ndarray:
    """float32 from model backends [R]; a backend that hands over float64 (the canned fake, exact tabular
    pairs) keeps it, so an exactness check can run through the scorer at 1e-10."""
    a = np.asarray(x)
    return a if a.dtype == np.float64 else a.astype(np.float32)


def score_segments(lm: Any, segments: Segments, *, top_k: int = 0, truncate: Literal["error", "left"] = "error",
                   max_len: int | None = None) -> SegmentScores:
    """Score every token of the concatenated ``segments`` with one forward pass of ``lm``.

    ``max_len`` overrides the model's context length (``lm.max_positions``) for the truncation rule.
    """
    return score_segments_batch(lm, [segments], top_k=top_k, truncate=truncate, max_len=max_len)[0]


def score_segments_batch(lm: Any, batch: Sequence[Segments], *, batch_size: int = 4, top_k: int = 0,
                         truncate: Literal["error", "left"] = "error",
                         max_len: int | None = None) -> list[SegmentScores]:
    """:func:`score_segments` for many sequences, ``batch_size`` per right-padded forward pass."""
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    prepared = [_prepare(lm, segs, truncate, max_len) for segs in batch]
    results: list[SegmentScores] = []
    for start in range(0, len(prepared), batch_size):
        chunk = prepared[start: start + batch_size]
        scored = _backend_score(lm, [fed for _, fed, _, _ in chunk], top_k)
        for (seg_ids, _fed, offset, dropped), (lp, tk) in zip(chunk, scored):
            lps, tks = _split(seg_ids, _float(lp), None if tk is None else _float(tk), offset)
            results.append(SegmentScores(lps, [np.asarray(s, dtype=np.int64) for s in seg_ids], tks, dropped))
    return results
