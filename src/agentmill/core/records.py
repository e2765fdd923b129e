"""Run records: one JSON file per experiment run, written atomically.

A record is written to a temporary file in the same directory, flushed, fsynced and renamed over the target, so a
kill at any moment leaves either the old complete record or the new complete record, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate

RECORD_SCHEMA = 1


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The one atomic writer: yield a temporary path beside ``path``; on success fsync it and rename it over
    ``path``, on any error remove it. A kill at any moment leaves the old complete file or the new one, never a
    torn one. Writers that want a file name (``StepTable.to_jsonl``, ``torch.save``) write to the yielded path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; the output is an ordinary file of the user's
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename)."""
    with atomic_target(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically (Estimates, numpy values, paths and dataclasses
    are converted)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def write_jsonl_atomic(path: str | os.PathLike[str], records: Iterable[Any]) -> Path:
    """Write one JSON object per line to ``path`` atomically."""
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n"
                                           for r in records))


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, Estimate):
        return o.to_dict()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@dataclass
class RunRecord:
    """Everything needed to audit one experiment run.

    ``status`` is ``"ok"`` or ``"error"``; an error record keeps the message and no metrics. ``verdicts`` maps a
    claim id to ``supported`` / ``not_supported`` / ``inconclusive`` (or ``not_judged`` at the smoke profile).
    ``data`` holds the raw series the report plots from.
    """

    experiment_id: str
    profile: str
    setup: dict[str, Any]
    status: str = "ok"
    metrics: dict[str, Estimate] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    model: str | None = None
    version: str = ""
    git_commit: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_seconds: float = 0.0
    setup_hash: str = ""
    schema: int = RECORD_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrics"] = {k: v.to_dict() for k, v in self.metrics.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        d = dict(d)
        d["metrics"] = {k: Estimate.from_dict(v) for k, v in d.get("metrics", {}).items()}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def write(self, path: str | os.PathLike[str]) -> Path:
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunRecord:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))
