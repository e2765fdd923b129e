"""The drafter's feature cache ([R] design; the paper's trainer likewise exchanges final hidden states [A]): one
teacher-forced target pass per corpus sequence stores what training needs, so the 135M target never runs inside the
training loop.

Per token: ``tokens`` (int32), ``loss_mask`` (response positions), ``taps`` [m·d] (fp16; the drafter's context
input), ``final_hidden`` [d] (fp16; the post-final-norm input of the LM head) and ``lse`` (fp32; log-sum-exp of the
full target logits). Exact target probabilities on the draft vocabulary are then recomputed in training as
``exp(final_hidden · W_lm[D]ᵀ − lse)`` and the mass outside D as ``1 − Σ_D``: 5.8 KB per token instead of 200 KB of
full logits (the paper's production trainer likewise ships the final hidden state, not logits).

The cache is memory-mapped ``.npy`` files plus ``manifest.json`` keyed by (target fingerprint, corpus hash, tap
layers, dtype); a cache whose key differs is rebuilt, never silently reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.dspark.data import load_corpus


def corpus_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def cache_key(fingerprint: str, corpus: Path, layers: Sequence[int], dtype: str = "float16") -> dict[str, Any]:
    return {"target": fingerprint, "corpus": corpus_hash(corpus), "layers": list(layers), "dtype": dtype,
            "schema": "agentmill.dspark-features/1"}


@dataclass
class FeatureCache:
    """A loaded (memory-mapped) cache."""

    root: Path
    tokens: np.ndarray        # [N] int32
    loss_mask: np.ndarray     # [N] bool
    taps: np.ndarray          # [N, m·d] fp16
    final_hidden: np.ndarray  # [N, d] fp16
    lse: np.ndarray           # [N] fp32
    offsets: np.ndarray       # [S+1] int64: sequence s is rows offsets[s]:offsets[s+1]
    meta: dict[str, Any]

    @property
    def n_sequences(self) -> int:
        return len(self.offsets) - 1

    def sequence(self, s: int) -> slice:
        return slice(int(self.offsets[s]), int(self.offsets[s + 1]))

    @classmethod
    def load(cls, root: Path) -> FeatureCache:
        root = Path(root)
        meta = json.loads((root / "manifest.json").read_text())
        arr = {k: np.load(root / f"{k}.npy", mmap_mode="r") for k in
               ("tokens", "loss_mask", "taps", "final_hidden", "lse", "offsets")}
        return cls(root, meta=meta, **arr)


def token_counts(corpus: Path, vocab_size: int) -> np.ndarray:
    counts = np.zeros(vocab_size, dtype=np.int64)
    for row in load_corpus(corpus):
        np.add.at(counts, np.asarray(row["prompt"] + row["response"], dtype=np.int64), 1)
    return counts


def build_feature_cache(engine: Any, corpus: Path, out: Path, *, layers: Sequence[int] = (1, 10, 19, 28),
                        batch_tokens: int = 2048, progress: Any = None) -> FeatureCache:
    """Teacher-forced pass over every corpus sequence (ragged batches of ≤ ``batch_tokens``). ``engine`` must have
    been built with ``tap_layers=layers`` and ``return_final_hidden=True``. Reuses ``out`` when its key matches."""
    import torch

    out = Path(out)
    key = cache_key(engine.fingerprint, corpus, layers)
    if (out / "manifest.json").exists():
        meta = json.loads((out / "manifest.json").read_text())
        if meta.get("key") == key:
            return FeatureCache.load(out)
        shutil.rmtree(out)
    if tuple(engine.engine_config.tap_layers) != tuple(layers) or not engine.engine_config.return_final_hidden:
        raise ValueError(f"the engine must tap layers {tuple(layers)} and return final hidden states")
    rows = [r for r in load_corpus(corpus) if r["response"]]
    if not rows:
        raise ValueError(f"corpus {corpus} has no sequence with a response")
    seqs = [r["prompt"] + r["response"] for r in rows]
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    N, d = int(offsets[-1]), engine.model_config.hidden_size
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    def mm(name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.lib.format.open_memmap(tmp / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)

    tokens = mm("tokens", (N,), np.int32)
    loss_mask = mm("loss_mask", (N,), np.bool_)
    taps = mm("taps", (N, len(layers) * d), np.float16)
    final = mm("final_hidden", (N, d), np.float16)
    lse = mm("lse", (N,), np.float32)
    for s, r in enumerate(rows):
        a = int(offsets[s])
        tokens[a: a + lens[s]] = seqs[s]
        loss_mask[a: a + lens[s]] = [False] * len(r["prompt"]) + [True] * len(r["response"])
    from agentmill.lm.engine import RaggedBatch

    i = 0
    while i < len(seqs):
        j, tot = i, 0
        while j < len(seqs) and (tot + lens[j] <= batch_tokens or j == i):
            tot += lens[j]
            j += 1
        batch, ids = RaggedBatch(), []
        for s in range(i, j):
            sq = engine.new_sequence()
            ids.append(sq)
            batch.add(sq, seqs[s], "all")
        try:
            fo = engine.forward(batch)
        finally:
            for sq in ids:
                engine.free(sq)
        a, b = int(offsets[i]), int(offsets[j])
        taps[a:b] = fo.taps.float().numpy().astype(np.float16)
        final[a:b] = fo.final_hidden.float().numpy().astype(np.float16)
        lse[a:b] = torch.logsumexp(fo.logits.float(), -1).numpy()
        if progress is not None:
            progress(j - i)
        i = j
    for m in (tokens, loss_mask, taps, final, lse):
        m.flush()
    np.save(tmp / "offsets.npy", offsets)
    meta = {"key": key, "n_sequences": len(seqs), "n_tokens": N, "response_tokens": int(loss_mask.sum()),
            "domains": [r["domain"] for r in rows], "families": [r["family"] for r in rows]}
    (tmp / "manifest.json").write_text(json.dumps(meta))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return FeatureCache.load(out)
