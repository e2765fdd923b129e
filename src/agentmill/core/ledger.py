"""Hash-chained, append-only JSONL audit ledger with content-addressed blobs.

A run that must be auditable and resumable (an AutoCog discovery loop, a long agent session) appends one event per
completed step to ``<dir>/ledger.jsonl``. Each line is ``{seq, ts, run_id, round, slot, step, kind, payload_sha256,
payload | blob, prev_hash, hash}`` (keys sorted) with

    hash = sha256(prev_hash ‖ canonical({step, kind, round, slot, payload_sha256}))

starting from ``GENESIS``. The chain covers the payload and the event's identity fields, so an edited payload or a
relabelled event is detected by :meth:`Ledger.verify`; ``ts`` and ``meta`` (latency, an endpoint address) are
informational and outside the hash, so a run killed and resumed at its head reproduces the uninterrupted run's head
hash. This line format and chain formula are fixed: ledgers written by earlier versions must keep verifying and
resuming (``tests/core/test_ledger.py`` pins a head hash).

Every event is flushed and fsynced before ``append`` returns. A torn last line (a crash mid-write) is truncated on
open and reported in ``repaired``; a corrupt line anywhere else is refused. Payloads whose canonical JSON is longer
than ``INLINE_MAX`` bytes are stored once under ``<dir>/blobs/<sha256>`` with the one atomic writer
(:func:`agentmill.core.records.write_bytes_atomic`), which is also what callers use for snapshots beside the ledger
(a ``state.json`` that must never be torn).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.records import write_bytes_atomic

GENESIS = "0" * 64
INLINE_MAX = 2048


def canonical(obj: Any) -> bytes:
    """The one byte encoding that is hashed: JSON with sorted keys, no spaces, numpy values as plain JSON. Changing
    it changes every hash ever written, so it never changes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_numpy_default).encode()


def _numpy_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o)}")


def chain_hash(prev: str, step: str, kind: str, round: int | None, slot: int | None, payload_sha256: str) -> str:
    """hash = sha256(prev_hash ‖ canonical({step, kind, round, slot, payload_sha256})): a chain over the payload,
    extended to the event's identity fields so a relabelled event is detected too."""
    head = canonical({"step": step, "kind": kind, "round": round, "slot": slot, "payload_sha256": payload_sha256})
    return hashlib.sha256(prev.encode() + head).hexdigest()


class Ledger:
    """The ledger in directory ``run_dir`` (created if missing); an existing ``ledger.jsonl`` is loaded, so opening
    a ledger again resumes at its head. Steps are unique keys: ``has``/``get`` let a resumed run skip what is done."""

    def __init__(self, run_dir: str | os.PathLike[str], run_id: str = "run") -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "blobs").mkdir(exist_ok=True)
        self.path = self.dir / "ledger.jsonl"
        self.run_id = run_id
        self.events: list[dict] = []
        self.by_step: dict[str, dict] = {}
        self.repaired: str | None = None
        """What ``open`` repaired (a torn last line), or None."""
        self.scope: dict | None = None
        """``{step, round, slot, n}`` while a driver computes ``step`` (set by the driver, e.g. AutoCog's loop), so a
        callee that appends its own events (an ``lm_call``) can key them under that step; None outside a step."""
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        good = 0
        for i, line in enumerate(lines):
            if not line:
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                if i >= len(lines) - 2:  # only the last (unterminated) line may be torn
                    self.repaired = f"truncated a torn last line of {len(line)} bytes"
                    break
                raise ValueError(f"ledger line {i + 1} is corrupt (not the last line): refusing to continue")
            self.events.append(ev)
            self.by_step[ev["step"]] = ev
            good += len(line) + 1
        if self.repaired or not raw.endswith(b"\n") and raw:
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
            self.repaired = self.repaired or "truncated a torn last line"

    @property
    def head(self) -> str:
        """The hash of the last event (``GENESIS`` when empty): a whole run's fingerprint."""
        return self.events[-1]["hash"] if self.events else GENESIS

    def payload(self, ev: dict) -> Any:
        if "payload" in ev:
            return ev["payload"]
        return json.loads((self.dir / "blobs" / ev["blob"]).read_bytes())

    def get(self, step: str) -> Any | None:
        ev = self.by_step.get(step)
        return None if ev is None else self.payload(ev)

    def has(self, step: str) -> bool:
        return step in self.by_step

    def append(self, kind: str, step: str, payload: Any, *, round: int | None = None, slot: int | None = None,
               meta: dict | None = None) -> dict:
        """Append one event (durable when this returns) and return it. A ``step`` already present is an error."""
        if step in self.by_step:
            raise ValueError(f"step {step!r} is already in the ledger (duplicate)")
        body = canonical(payload)
        psha = hashlib.sha256(body).hexdigest()
        h = chain_hash(self.head, step, kind, round, slot, psha)
        ev: dict[str, Any] = {"seq": len(self.events), "ts": time.time(), "run_id": self.run_id, "round": round,
                              "slot": slot, "step": step, "kind": kind, "payload_sha256": psha,
                              "prev_hash": self.head, "hash": h}
        if len(body) > INLINE_MAX:
            bp = self.dir / "blobs" / psha
            if not bp.exists():
                write_bytes_atomic(bp, body)
            ev["blob"] = psha
        else:
            ev["payload"] = json.loads(body)
        if meta:
            ev["meta"] = meta
        with open(self.path, "ab") as f:
            f.write(json.dumps(ev, sort_keys=True).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.events.append(ev)
        self.by_step[step] = ev
        return ev

    def verify(self) -> list[str]:
        """Problems found: broken chain, payload hash mismatch, missing blob. Empty list = intact."""
        problems, prev = [], GENESIS
        for ev in self.events:
            try:
                body = canonical(self.payload(ev))
            except FileNotFoundError:
                problems.append(f"seq {ev['seq']}: blob {ev.get('blob')} missing")
                continue
            if hashlib.sha256(body).hexdigest() != ev["payload_sha256"]:
                problems.append(f"seq {ev['seq']}: payload hash mismatch")
            if ev["prev_hash"] != prev or chain_hash(prev, ev["step"], ev["kind"], ev["round"], ev["slot"],
                                                     hashlib.sha256(body).hexdigest()) != ev["hash"]:
                problems.append(f"seq {ev['seq']}: hash chain broken")
            prev = ev["hash"]
        return problems
