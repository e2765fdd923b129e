"""Content-addressed summary cache for the crossing experiment (docs/methods/constraint_rot.md
"Experiments and commands", PF-6).

Every (episode, summariser) compaction is computed **once** and every actor reads the same compacted context, so
the number of summariser calls in a crossing run is episodes × summarisers, never × actors. The address of an
entry is the sha256 of the compactor's configuration hash and the input messages (what a model reads of them plus
their harness origins, which decide e.g. which message is a prior summary), so the same input under the same
summariser always finds the same entry, and anything that could change the output changes the address.

Entries are JSON files ``<root>/<key[:2]>/<key>.json``, written to a temporary file and hard-linked into place:
an entry is **never overwritten** (a second ``put`` under the same key keeps the first value and says so), and a
killed process never leaves a half-written entry. ``hits``/``misses`` count ``get`` results, ``writes`` the
entries this object created: in a crossing run ``misses`` equals the number of summariser calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentmill.core.types import Message

_HEX = frozenset("0123456789abcdef")


def cache_key(config_hash: str, messages: Sequence[Message], **extra: Any) -> str:
    """sha256 (64 hex) of the compactor config hash, the messages (``to_dict`` plus ``meta['origin']``) and any
    call arguments that change the output (e.g. ``keep_last``)."""
    if not isinstance(config_hash, str) or not config_hash:
        raise ValueError(f"cache_key: config_hash must be a non-empty string, got {config_hash!r}")
    blob = json.dumps({"config": config_hash, "extra": extra,
                       "messages": [[m.to_dict(), m.meta.get("origin")] for m in messages]},
                      sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class SummaryCache:
    """A directory of write-once JSON entries keyed by :func:`cache_key`."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"SummaryCache.root {str(self.root)!r} exists and is not a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def __repr__(self) -> str:
        return f"SummaryCache({str(self.root)!r}, hits={self.hits}, misses={self.misses}, writes={self.writes})"

    key = staticmethod(cache_key)

    def path(self, key: str) -> Path:
        if not isinstance(key, str) or len(key) != 64 or not set(key) <= _HEX:
            raise ValueError(f"SummaryCache: key must be 64 lower-case hex characters (a sha256), got {key!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value, or None (counted as a hit or a miss)."""
        p = self.path(key)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.misses += 1
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"SummaryCache: entry {p} is not valid JSON ({e}); delete it to recompute") from e
        self.hits += 1
        return value

    def put(self, key: str, value: dict[str, Any]) -> bool:
        """Store ``value`` (a JSON-serialisable dict) unless ``key`` exists; True if this call wrote it."""
        if not isinstance(value, dict):
            raise ValueError(f"SummaryCache.put: value must be a dict, got {type(value).__name__}")
        p = self.path(key)
        if p.exists():
            return False
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(value, f, sort_keys=True, ensure_ascii=False)
            try:
                os.link(tmp, p)  # atomic and fails if the entry exists: a concurrent writer never overwrites
            except FileExistsError:
                return False
        finally:
            os.unlink(tmp)
        self.writes += 1
        return True

    def __contains__(self, key: str) -> bool:
        return self.path(key).exists()

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("??/*.json"))

    def stats(self) -> dict[str, int]:
        """Counters for PF-6: ``misses`` = summariser calls made through this cache."""
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes, "entries": len(self)}
