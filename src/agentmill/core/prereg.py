"""One loader for pre-registration files: a YAML document of frozen thresholds, read, validated and hashed.

A pre-registration fixes thresholds before any data are seen; every report that judges against it prints the sha256
of the exact bytes it came from, so a threshold edited after the fact shows up as a different hash. The document is
a mapping with a non-empty string ``version`` and a ``thresholds`` mapping of ``name -> number | [lo, hi] | bool``
(more top-level sections are kept as they are). PyYAML is imported when a file is read, not at import time.

``methods/constraint_rot/prereg.py`` predates this module and keeps its own richer schema; new methods use this one.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class PreregError(ValueError):
    """A malformed or unreadable pre-registration; the message names the file and the field."""


@dataclass(frozen=True)
class Prereg:
    """A loaded pre-registration: ``sha256`` of the bytes, the ``path`` it came from, its ``version``, the
    ``thresholds`` and the whole parsed ``document``."""

    version: str
    sha256: str
    path: str
    thresholds: dict[str, Any]
    document: dict[str, Any] = field(repr=False)

    def threshold(self, name: str) -> Any:
        """The threshold ``name``; a missing one raises ``KeyError`` naming the file."""
        if name not in self.thresholds:
            raise KeyError(f"no threshold {name!r} in pre-registration {self.path}")
        return self.thresholds[name]


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as e:
        from agentmill.core.extras import MissingExtraError, extra_for_module

        raise MissingExtraError(extra_for_module("yaml") or "probe", "reading a pre-registration (YAML)") from e
    return yaml


def _check_value(v: Any, where: str) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        if math.isnan(float(v)):
            raise PreregError(f"{where}: NaN is not a threshold")
        return v
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                    for x in v):
        if v[0] > v[1]:
            raise PreregError(f"{where}: range [{v[0]}, {v[1]}] has lo > hi")
        return v
    raise PreregError(f"{where}: a threshold is a number, a [lo, hi] pair or a bool, got {v!r}")


def parse_prereg(raw: bytes | str, *, path: str = "<string>") -> Prereg:
    """Validate YAML text into a :class:`Prereg`; ``sha256`` is over the exact bytes."""
    data = raw.encode() if isinstance(raw, str) else raw
    yaml = _yaml()
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise PreregError(f"{path}: invalid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise PreregError(f"{path}: the top level must be a mapping")
    version = doc.get("version")
    if not isinstance(version, str) or not version:
        raise PreregError(f"{path}: field 'version' must be a non-empty string, got {version!r}")
    th = doc.get("thresholds")
    if not isinstance(th, dict) or not th:
        raise PreregError(f"{path}: field 'thresholds' must be a non-empty mapping")
    thresholds = {str(k): _check_value(v, f"{path} thresholds.{k}") for k, v in th.items()}
    return Prereg(version, hashlib.sha256(data).hexdigest(), path, thresholds, doc)


def load_prereg(path: str | Path) -> Prereg:
    """Read, validate and hash the pre-registration at ``path``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise PreregError(f"cannot read pre-registration {p}: {e}") from e
    return parse_prereg(raw, path=str(p))


__all__ = ["Prereg", "PreregError", "load_prereg", "parse_prereg"]
