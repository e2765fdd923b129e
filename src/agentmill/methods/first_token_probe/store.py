"""The on-disk activation store: hidden states of sampled rollouts at named positions and layers, written once by
``agentmill probe extract`` and read back by ``probe fit --acts`` (docs/methods/first_token_probe.md, "Activation
store").

A store is a directory holding ``manifest.json`` and ``shard-NNNNN.npz`` files. Each shard keeps ``H``
[rows, P, L, d] as float16 (NaN where a position does not exist for a row), ``mask`` [rows, P] and the token id at
each position ``tokens`` [rows, P] (−1 when missing). The manifest names the format, the model (spec and parameter
digest), the positions and layers, d, each shard's rows and sha256, and per row the rollout's id, template, split,
labels, vote, resolved positions and the sha256 of its ids and text; ``rollouts.jsonl`` beside it keeps the
rollout rows themselves, so a probe can be fit on the store without the model. Reading checks every shard's hash and
shape against the manifest and refuses a store that does not match, naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.first_token_probe.capture import ActivationSet
from agentmill.methods.first_token_probe.rollout_files import jsonl_lines

FORMAT = "agentmill.activations/1"
REQUIRED = ("rollout_id", "template_id", "split", "prompt_ids", "sampled_ids", "text")
"""Keys an extractable rollout row must carry (``probe sample --out`` rows have them)."""


class StoreError(ValueError):
    """A rollouts file or a store that cannot be used; the message names the file and the line or shard."""


def rollout_sha256(row: dict[str, Any]) -> str:
    """sha256 of a rollout's prompt ids, sampled ids and text (canonical JSON): what its activations are a
    function of, together with the model."""
    blob = json.dumps([list(row["prompt_ids"]), list(row["sampled_ids"]), row["text"]], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def parse_positions(spec: str) -> list[str]:
    """Comma-separated position specs; ``frac:a:b:s`` expands to ``frac:a``, ``frac:a+s``, …, ``frac:b``."""
    out: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        bits = part.split(":")
        if bits[0] == "frac" and len(bits) == 4:
            try:
                a, b, s = (float(x) for x in bits[1:])
            except ValueError:
                raise StoreError(f"position {part!r}: frac:a:b:step needs three numbers") from None
            if not (0 <= a <= b <= 1 and s > 0):
                raise StoreError(f"position {part!r}: need 0 ≤ a ≤ b ≤ 1 and step > 0")
            n = int(np.floor((b - a) / s + 1e-9)) + 1
            out += [f"frac:{round(a + i * s, 6):g}" for i in range(n)]
        else:
            out.append(part)
    if not out:
        raise StoreError("no positions given")
    if len(set(out)) != len(out):
        raise StoreError(f"positions repeat: {out}")
    return out


def parse_layers(spec: str, n_states: int) -> list[int]:
    """``all`` (0 … n_states − 1; 0 = embeddings) or comma-separated hidden-state indices."""
    if spec.strip() == "all":
        return list(range(n_states))
    try:
        lay = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise StoreError(f"--layers {spec!r}: 'all' or comma-separated integers") from None
    bad = [x for x in lay if not 0 <= x < n_states]
    if not lay or bad:
        raise StoreError(f"--layers {spec!r}: hidden-state indices run 0..{n_states - 1} (0 = embeddings)")
    return lay


def read_rollout_rows(path: str | os.PathLike[str], *, vocab: int | None = None,
                      max_positions: int | None = None) -> list[dict[str, Any]]:
    """The rows of a rollouts JSONL file, each checked for what extraction needs; raises :class:`StoreError`
    naming the file and the 1-based line of the first bad row."""
    p = Path(path)
    rows = []
    for i, row in jsonl_lines(p, StoreError):
        if not isinstance(row, dict):
            raise StoreError(f"{p}: line {i} is not a JSON object")
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise StoreError(f"{p}: line {i} lacks {missing} (rows of `agentmill probe sample --out` have them)")
        for k in ("prompt_ids", "sampled_ids"):
            ids = row[k]
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise StoreError(f"{p}: line {i}: {k!r} must be a list of integer token ids")
            if vocab is not None and any(not 0 <= t < vocab for t in ids):
                raise StoreError(f"{p}: line {i}: {k!r} holds a token id outside the model's vocabulary 0..{vocab - 1}")
        if not row["prompt_ids"]:
            raise StoreError(f"{p}: line {i}: 'prompt_ids' is empty")
        if not isinstance(row["text"], str):
            raise StoreError(f"{p}: line {i}: 'text' must be a string")
        n = len(row["prompt_ids"]) + len(row["sampled_ids"])
        if max_positions is not None and n > max_positions:
            raise StoreError(f"{p}: line {i}: {n} tokens, over the model's context of {max_positions}")
        row["_line"] = i
        rows.append(row)
    if not rows:
        raise StoreError(f"{p}: no rollouts in this file")
    ids = [str(r["rollout_id"]) for r in rows]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        line = next(r["_line"] for r in rows[ids.index(dup) + 1:] if str(r["rollout_id"]) == dup)
        raise StoreError(f"{p}: line {line}: rollout_id {dup!r} repeats an earlier row")
    return rows


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_store(out: str | os.PathLike[str], acts: ActivationSet, rows: Sequence[dict[str, Any]], *, model: str,
                model_digest: str, source: str = "", shard_rows: int = 1024) -> Path:
    """Write ``acts`` (aligned with ``rows``) as a store in the new or empty directory ``out``; returns the
    manifest path. Shards are written first, the manifest last (a directory without one is not a store)."""
    from agentmill.core.records import write_text_atomic

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise StoreError(f"--out {out} is not empty: a store goes to a new directory")
    if len(rows) != acts.H.shape[0]:
        raise ValueError(f"{len(rows)} rows for {acts.H.shape[0]} activation rows")
    out.mkdir(parents=True, exist_ok=True)
    shards = []
    for s in range(0, len(rows), shard_rows):
        name = f"shard-{s // shard_rows:05d}.npz"
        e = min(len(rows), s + shard_rows)
        with open(out / name, "wb") as f:
            np.savez(f, H=acts.H[s:e].astype(np.float16), mask=acts.mask[s:e], tokens=acts.tokens[s:e])
        shards.append({"file": name, "rows": e - s, "sha256": _file_sha(out / name)})
    keep = ("rollout_id", "template_id", "category", "split", "q", "labels", "vote", "truth")
    manifest = {
        "format": FORMAT, "model": model, "model_digest": model_digest, "positions": list(acts.positions),
        "layers": list(acts.layers), "hidden_size": int(acts.H.shape[-1]), "dtype": "float16", "n": len(rows),
        "source": source, "shards": shards,
        "rows": [{**{k: r.get(k) for k in keep}, "rollout_sha256": rollout_sha256(r),
                  "index": acts.index[i] if acts.index else {}} for i, r in enumerate(rows)]}
    write_text_atomic(out / "rollouts.jsonl", "".join(json.dumps({k: v for k, v in r.items() if k != "_line"}) + "\n"
                                                      for r in rows))
    write_text_atomic(out / "manifest.json", json.dumps(manifest, indent=1))
    return out / "manifest.json"


def read_store(path: str | os.PathLike[str]) -> tuple[ActivationSet, list[dict[str, Any]], dict[str, Any]]:
    """(activations as float32, the rollout rows, the manifest) of a store; every shard's sha256 and shape and
    every row's rollout hash are checked against the manifest."""
    d = Path(path)
    mpath = d / "manifest.json"
    if not mpath.is_file():
        raise StoreError(f"{d}: not an activation store (no manifest.json; write one with `agentmill probe extract`)")
    try:
        m = json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise StoreError(f"{mpath}: not JSON ({e.msg})") from None
    if m.get("format") != FORMAT:
        raise StoreError(f"{mpath}: format {m.get('format')!r}, expected {FORMAT!r}")
    P, L, D = len(m["positions"]), len(m["layers"]), int(m["hidden_size"])
    Hs, masks, toks = [], [], []
    for sh in m["shards"]:
        f = d / sh["file"]
        if not f.is_file():
            raise StoreError(f"{f}: shard missing")
        if _file_sha(f) != sh["sha256"]:
            raise StoreError(f"{f}: sha256 differs from the manifest (the shard changed after it was written)")
        with np.load(f) as z:
            H, mk, tk = z["H"], z["mask"], z["tokens"]
        if H.shape != (sh["rows"], P, L, D) or mk.shape != (sh["rows"], P) or tk.shape != (sh["rows"], P):
            raise StoreError(f"{f}: shape {H.shape}, manifest says {(sh['rows'], P, L, D)}")
        Hs.append(H.astype(np.float32))
        masks.append(mk)
        toks.append(tk)
    rpath = d / "rollouts.jsonl"
    rows = [json.loads(x) for x in rpath.read_text().splitlines() if x.strip()] if rpath.is_file() else []
    if len(rows) != m["n"] or sum(sh["rows"] for sh in m["shards"]) != m["n"]:
        raise StoreError(f"{d}: {len(rows)} rollouts and {sum(sh['rows'] for sh in m['shards'])} shard rows, "
                         f"manifest says {m['n']}")
    for i, (r, meta) in enumerate(zip(rows, m["rows"]), 1):
        if rollout_sha256(r) != meta["rollout_sha256"]:
            raise StoreError(f"{rpath}: line {i} ({r.get('rollout_id')}) differs from the rollout the activations "
                             "were extracted from")
    acts = ActivationSet(np.concatenate(Hs), np.concatenate(masks), np.concatenate(toks), list(m["positions"]),
                         [int(x) for x in m["layers"]], [meta["index"] for meta in m["rows"]],
                         {"model": m["model"], "dtype": "float16", "store": str(d)})
    return acts, rows, m


def subset(acts: ActivationSet, idx: Sequence[int]) -> ActivationSet:
    """The rows ``idx`` of an activation set."""
    ix = np.asarray(idx, dtype=int)
    return ActivationSet(acts.H[ix], acts.mask[ix], acts.tokens[ix], list(acts.positions), list(acts.layers),
                         [acts.index[i] for i in ix] if acts.index else [], dict(acts.meta))


def select_positions(acts: ActivationSet, positions: Sequence[str]) -> ActivationSet:
    """The named positions of an activation set (each must be in the store)."""
    missing = [x for x in positions if x not in acts.positions]
    if missing:
        raise StoreError(f"positions {missing} are not in the store (it holds {acts.positions})")
    ix = [acts.positions.index(x) for x in positions]
    index = [{x: row.get(x) for x in positions} for row in acts.index] if acts.index else []
    return ActivationSet(acts.H[:, ix], acts.mask[:, ix], acts.tokens[:, ix], list(positions), list(acts.layers),
                         index, dict(acts.meta))


def load_train_test(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[Any], list[Any], ActivationSet,
                                                                       ActivationSet, dict[str, Any]]:
    """Stores read back for probe fitting: their rows split by the rollouts' ``split`` into ``probe_train`` and
    ``probe_test`` (both must be present); returns (train rollouts, test rollouts, their activations, the first
    manifest). Several stores must share model digest, positions and layers."""
    from agentmill.methods.first_token_probe.relabel import rows_to_rollouts

    sets = [read_store(p) for p in paths]
    if not sets:
        raise StoreError("no store given")
    m0 = sets[0][2]
    for (_, _, m), p in zip(sets[1:], paths[1:]):
        for k in ("model_digest", "positions", "layers"):
            if m[k] != m0[k]:
                raise StoreError(f"{p}: {k} differs from {paths[0]}'s; stores combine only when extracted alike")
    acts = ActivationSet(np.concatenate([a.H for a, _, _ in sets]), np.concatenate([a.mask for a, _, _ in sets]),
                         np.concatenate([a.tokens for a, _, _ in sets]), list(sets[0][0].positions),
                         list(sets[0][0].layers), [x for a, _, _ in sets for x in a.index], dict(sets[0][0].meta))
    rows = [r for _, rs, _ in sets for r in rs]
    ids = [str(r["rollout_id"]) + "|" + str(r["split"]) for r in rows]
    if len(set(ids)) != len(ids):
        raise StoreError("the stores hold the same rollout twice")
    tr = [i for i, r in enumerate(rows) if r["split"] == "probe_train"]
    te = [i for i, r in enumerate(rows) if r["split"] == "probe_test"]
    if not tr or not te:
        raise StoreError(f"probe fitting needs rollouts of both probe_train and probe_test; the stores hold "
                         f"{sorted({str(r['split']) for r in rows})} (extract `probe sample --split probe_train` "
                         "and `--split probe_test` outputs)")
    train = rows_to_rollouts([rows[i] for i in tr], where=str(paths[0]))
    test = rows_to_rollouts([rows[i] for i in te], where=str(paths[0]))
    return train, test, subset(acts, tr), subset(acts, te), m0


def extract(lm: Any, rows: Sequence[dict[str, Any]], positions: Sequence[str], layers: Sequence[int] | str,
            out: str | os.PathLike[str], *, source: str = "", batch_size: int = 16) -> Path:
    """Capture ``rows`` (rollouts file rows) on ``lm`` at ``positions`` × ``layers`` and write the store."""
    from agentmill.methods.first_token_probe.capture import capture
    from agentmill.methods.first_token_probe.relabel import rows_to_rollouts
    from agentmill.methods.first_token_probe.sampling import model_digest

    rolls = rows_to_rollouts(rows, where=source or "rollouts")
    acts = capture(lm, rolls, positions, layers, batch_size=batch_size)
    return write_store(out, acts, rows, model=str(getattr(lm, "spec", "?")), model_digest=model_digest(lm),
                       source=source)


__all__ = ["FORMAT", "StoreError", "extract", "load_train_test", "parse_layers", "parse_positions",
           "read_rollout_rows", "read_store", "rollout_sha256", "select_positions", "subset", "write_store"]
