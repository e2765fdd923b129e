"""A paired activation store on disk: ``meta.json`` + ``shard_{i:05d}.safetensors``, read memory-mapped.

Each shard holds ``x`` (n, 2, d) normalised activations (float16, or float32 when any |value| > 6·10⁴), ``doc``,
``pos``, ``token`` (int32) and ``label`` (int8). ``meta.json`` records the models' identities, layer, position policy,
token-id hash, tokenizer fingerprint, s_A and s_B, the row count and the shards written; a shard is complete iff
``meta.json`` lists it (shards and meta are written to a temporary name, fsynced and renamed), so an interrupted
collection resumes at the first unlisted shard.

:func:`collect_paired` feeds identical token ids to two white-box models and keeps block ``layer``'s output
(``hidden_states[layer + 1]``) at the chosen positions (position 0 excluded by default: massive activations).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

FP16_MAX = 6e4
FORMAT = "agentmill.crosscoder.store/1"


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class ActivationStore:
    """A directory of paired rows; :meth:`rows` returns them as one array (memory-mapped shards concatenated)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        meta = self.path / "meta.json"
        self.meta: dict[str, Any] = json.loads(meta.read_text()) if meta.exists() else {}

    @property
    def scales(self) -> tuple[float, float]:
        return float(self.meta["s_A"]), float(self.meta["s_B"])

    @property
    def identity(self) -> dict[str, Any]:
        """What a crosscoder trained on this store records (checked when it is loaded against the store)."""
        return {k: self.meta.get(k) for k in ("models", "layer", "positions", "ids_sha256", "s_A", "s_B")}

    def shard_names(self) -> list[str]:
        return list(self.meta.get("shards", []))

    def write_shard(self, arrays: dict[str, np.ndarray]) -> str:
        """Append one shard (atomically) and list it in ``meta.json``."""
        from safetensors.numpy import save

        x = arrays["x"]
        if not np.isfinite(x).all():
            bad = int(np.argmax(~np.isfinite(x).all(axis=(1, 2))))
            raise ValueError(f"activation rows hold NaN/inf; first at row {bad}")
        dtype = np.float32 if np.abs(x).max(initial=0) > FP16_MAX else np.float16
        out = {"x": x.astype(dtype), "doc": arrays["doc"].astype(np.int32), "pos": arrays["pos"].astype(np.int32),
               "token": arrays["token"].astype(np.int32), "label": arrays["label"].astype(np.int8)}
        name = f"shard_{len(self.shard_names()):05d}.safetensors"
        self.path.mkdir(parents=True, exist_ok=True)
        _atomic_write_bytes(self.path / name, save(out))
        self.meta.setdefault("shards", []).append(name)
        self.meta["rows"] = int(self.meta.get("rows", 0)) + len(x)
        self.write_meta()
        return name

    def write_meta(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        _atomic_write_bytes(self.path / "meta.json", json.dumps(self.meta, indent=1, sort_keys=True).encode())

    def rows(self, field: str = "x") -> np.ndarray:
        """Every listed shard's ``field`` concatenated (float32 for ``x``)."""
        from safetensors import safe_open

        parts = []
        for name in self.shard_names():
            with safe_open(str(self.path / name), framework="numpy") as fh:
                parts.append(fh.get_tensor(field))
        if not parts:
            raise ValueError(f"activation store {self.path} holds no complete shard")
        out = np.concatenate(parts)
        return out.astype(np.float32) if field == "x" else out


def _identity(lm: Any) -> str:
    info = getattr(lm, "info", {}) or {}
    return str(info.get("gguf_sha256") or info.get("spec") or getattr(lm, "spec", type(lm).__name__))


def collect_paired(models: Sequence[Any], ids: Sequence[Sequence[int]], *, layer: int, store: str | os.PathLike[str],
                   positions: str = "prompt", exclude_first: int = 1, labels: Sequence[int] | None = None,
                   shard_rows: int = 20_000, scale_rows: int = 10_000) -> ActivationStore:
    """Paired block-``layer`` outputs of ``models`` = (A, B) on the token-id sequences ``ids`` into ``store``.

    ``positions``: ``prompt`` (every position from ``exclude_first`` on) or ``last``. s_m is estimated on the first
    ``scale_rows`` rows (all rows when fewer) and stored; rows are stored normalised. Resumes when ``meta.json``
    matches this request (same models, layer, positions and ids); otherwise raises rather than mix two collections.
    """
    from agentmill.lm.scoring import tokenizer_fingerprint

    if len(models) != 2:
        raise ValueError(f"collect_paired needs two models (A, B), got {len(models)}")
    a, b = models
    for m in (a, b):
        if not hasattr(m, "forward"):
            raise TypeError(f"collect_paired needs a WhiteBoxLM; got {type(m).__name__}")
        if not 0 <= layer < m.num_layers:
            raise ValueError(f"layer {layer} is outside [0, {m.num_layers}) for {_identity(m)}")
    fa, fb = tokenizer_fingerprint(a), tokenizer_fingerprint(b)
    if fa != fb:
        raise ValueError(f"the two models tokenize differently (fingerprints {fa} vs {fb})")
    if positions not in ("prompt", "last"):
        raise ValueError(f"positions must be 'prompt' or 'last', got {positions!r}")
    if a.hidden_size != b.hidden_size:
        raise ValueError(f"the two views have different widths: {a.hidden_size} vs {b.hidden_size}")
    ids_sha = hashlib.sha256(json.dumps([list(map(int, s)) for s in ids]).encode()).hexdigest()
    want = {"format": FORMAT, "models": [_identity(a), _identity(b)], "layer": layer, "positions": positions,
            "exclude_first": exclude_first, "ids_sha256": ids_sha, "tokenizer": fa}
    st = ActivationStore(store)
    if st.meta:
        diff = [k for k, v in want.items() if st.meta.get(k) != v]
        if diff:
            raise ValueError(f"store {st.path} holds another collection ({diff[0]} differs); use a new directory")
        done_docs = int(st.meta.get("docs_done", 0))
    else:
        st.meta = dict(want)
        done_docs = 0

    def rows_of(i: int) -> tuple[np.ndarray, np.ndarray]:
        seq = list(map(int, ids[i]))
        hs = [m.forward([seq], hidden_states=True).hidden_states[layer + 1][0].float().numpy() for m in (a, b)]
        cols = np.arange(exclude_first, len(seq)) if positions == "prompt" else np.array([len(seq) - 1])
        return np.stack([hs[0][cols], hs[1][cols]], 1), cols

    if "s_A" not in st.meta:  # scales from the first scale_rows rows (raw), before any shard is written
        buf, i = [], 0
        while i < len(ids) and sum(len(x) for x in buf) < scale_rows:
            buf.append(rows_of(i)[0])
            i += 1
        raw = np.concatenate(buf).astype(np.float64)
        msq = (raw ** 2).sum(-1).mean(0)
        st.meta["s_A"], st.meta["s_B"] = float(np.sqrt(a.hidden_size / msq[0])), float(np.sqrt(a.hidden_size / msq[1]))
    sc = np.array([st.meta["s_A"], st.meta["s_B"]], np.float32)[None, :, None]
    pend: dict[str, list[np.ndarray]] = {k: [] for k in ("x", "doc", "pos", "token", "label")}
    for i in range(done_docs, len(ids)):
        x, cols = rows_of(i)
        seq = np.asarray(ids[i])
        pend["x"].append(x * sc)
        pend["doc"].append(np.full(len(cols), i))
        pend["pos"].append(cols)
        pend["token"].append(seq[cols])
        pend["label"].append(np.full(len(cols), labels[i] if labels is not None else 0))
        if sum(len(v) for v in pend["x"]) >= shard_rows or i == len(ids) - 1:
            st.meta["docs_done"] = i + 1
            st.write_shard({k: np.concatenate(v) for k, v in pend.items()})
            pend = {k: [] for k in pend}
    return st
