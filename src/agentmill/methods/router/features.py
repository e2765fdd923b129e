"""Query features x_q for the router head.

``NgramFeatures`` (LLM-free): hashed word 1–2-grams and character 2–4-grams (crc32 mod ``dim``, as the project's
``LinearSoftmaxPolicy`` hashes tokens), 2^14 dims by default, L2-normalised. ``HiddenStateFeatures``: the final-layer
hidden state of a frozen white-box LM at the last prompt token (``last``, TRINITY-like) or mean-pooled (``mean``),
read through ``WhiteBoxLM.forward(ids, hidden_states=True)``; endpoints are refused (``require_white_box``).
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


class NgramFeatures:
    """Sparse (n, dim) matrices of hashed n-gram counts, each row L2-normalised."""

    spec = "ngram"

    def __init__(self, dim: int = 2**14) -> None:
        if dim < 2:
            raise ValueError(f"dim must be >= 2, got {dim}")
        self.dim = int(dim)
        self._cache: dict[str, int] = {}

    def _h(self, tok: str) -> int:
        h = self._cache.get(tok)
        if h is None:
            h = self._cache[tok] = zlib.crc32(tok.encode()) % self.dim
        return h

    def indices(self, text: str) -> list[int]:
        t = text.lower()
        words = _WORD.findall(t)
        toks = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:])]
        s = " ".join(t.split())
        for n in (2, 3, 4):
            toks += [f"c{n}:{s[i:i + n]}" for i in range(len(s) - n + 1)]
        return [self._h(x) for x in toks]

    def transform(self, texts: Sequence[str]) -> Any:
        """A scipy CSR matrix (n, dim), float64, rows L2-normalised (empty text → zero row)."""
        from scipy.sparse import csr_matrix
        indptr, indices, data = [0], [], []
        for text in texts:
            idx, cnt = np.unique(np.asarray(self.indices(text), dtype=np.int64), return_counts=True)
            norm = float(np.sqrt((cnt.astype(np.float64) ** 2).sum())) or 1.0
            indices.append(idx)
            data.append(cnt / norm)
            indptr.append(indptr[-1] + len(idx))
        ind = np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64)
        dat = np.concatenate(data) if data else np.zeros(0)
        return csr_matrix((dat, ind, np.asarray(indptr)), shape=(len(texts), self.dim))

    def config(self) -> dict[str, Any]:
        return {"kind": "ngram", "dim": self.dim}


class HiddenStateFeatures:
    """Final-layer hidden state of a frozen white-box LM (``pool`` = ``last`` or ``mean``), L2-normalised."""

    def __init__(self, lm_spec: str, pool: str = "last", lm: Any = None) -> None:
        if pool not in ("last", "mean"):
            raise ValueError(f"pool must be 'last' or 'mean', got {pool!r}")
        from agentmill.lm import load_lm
        from agentmill.lm.base import require_white_box
        self.lm_spec, self.pool = lm_spec, pool
        self.lm = require_white_box(lm if lm is not None else load_lm(lm_spec), "router hidden-state features")
        self.spec = f"hidden:{lm_spec}:{pool}"
        self.last_ms = 0.0

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        import torch
        rows = []
        t0 = time.perf_counter()
        for text in texts:
            ids = torch.tensor([self.lm.encode(text)])
            with torch.no_grad():
                out = self.lm.forward(ids, hidden_states=True)
            hs = out.hidden_states[-1][0] if hasattr(out, "hidden_states") else out[1][-1][0]
            v = (hs[-1] if self.pool == "last" else hs.mean(0)).float().numpy()
            rows.append(v / max(np.linalg.norm(v), 1e-12))
        self.last_ms = 1000 * (time.perf_counter() - t0) / max(1, len(texts))
        return np.asarray(rows, dtype=np.float32)

    def config(self) -> dict[str, Any]:
        return {"kind": "hidden", "lm": self.lm_spec, "pool": self.pool}


def make_features(spec: str) -> Any:
    """``"ngram"`` or ``"hidden:<lm spec>[:last|:mean]"``."""
    if spec == "ngram":
        return NgramFeatures()
    if spec.startswith("ngram:"):
        return NgramFeatures(int(spec.split(":", 1)[1]))
    if spec.startswith("hidden:"):
        rest = spec[len("hidden:"):]
        pool = "last"
        if rest.endswith(":last") or rest.endswith(":mean"):
            rest, pool = rest.rsplit(":", 1)
        return HiddenStateFeatures(rest, pool)
    raise ValueError(f"unknown features {spec!r}; use 'ngram' or 'hidden:<lm spec>[:last|:mean]'")
