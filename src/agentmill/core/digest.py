"""Content digests of the files a result depends on: a model's GGUF, a trained drafter or adapter, a data fixture.

Resume and the experiments' work-dir caches compare these digests (``experiments/runner.py``), so an artefact
retrained or rewritten in place invalidates every record and cache computed from its old bytes. A GGUF is 100+ MB
and a suite asks for the same file once per experiment, so a file's digest is memoised for the life of the process
by (path, size, mtime): an unchanged file is read once, a rewritten one (new size or mtime) again."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

MISSING = "missing"
"""The digest of a path that does not exist. An artefact that appears later (a drafter trained or committed after
the run) then changes its digest like any rewrite, so what was computed without it is not reused."""

_FILES: dict[tuple[str, int, int], str] = {}

CHECKOUT = Path(__file__).resolve().parents[3]
"""The checkout this package runs from (``src/agentmill/core/`` is three levels below it)."""
IN_CHECKOUT = "<checkout>/"
"""Prefix of a recorded path inside :data:`CHECKOUT` (a shipped drafter, a fixture, the venv's GGUF): kept relative,
so a record made in another clone or a since-deleted worktree is checked against this checkout's copy of the file
instead of a path that no longer exists."""


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of a file's bytes, memoised per process by (resolved path, size, mtime in ns)."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    digest = _FILES.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        digest = _FILES[key] = h.hexdigest()
    return digest


def path_digest(path: str | os.PathLike[str]) -> str:
    """The digest of a file; of a directory (every file under it with its relative path, so a renamed or added file
    counts); or :data:`MISSING`."""
    p = Path(path).expanduser()
    if p.is_file():
        return file_digest(p)
    if p.is_dir():
        files = sorted((f.relative_to(p).as_posix(), f) for f in p.rglob("*") if f.is_file())
        h = hashlib.sha256()
        for rel, f in files:
            h.update(f"{rel}\0{file_digest(f)}\n".encode())
        return f"dir:{h.hexdigest()}"
    if os.path.lexists(p):  # a dangling symlink, a FIFO: nothing a result can have been read from
        raise ValueError(f"{p} is neither a file nor a directory; an artefact must be one")
    return MISSING


def recorded_path(path: str | os.PathLike[str]) -> str:
    """How a record names ``path``: ``<checkout>/relative/path`` inside :data:`CHECKOUT`, else the absolute path."""
    a = Path(path).expanduser().absolute()
    try:
        return IN_CHECKOUT + a.relative_to(CHECKOUT).as_posix()
    except ValueError:
        return str(a)


def local_path(recorded: str) -> Path:
    """The file a recorded path names in this checkout (the inverse of :func:`recorded_path`)."""
    return CHECKOUT / recorded[len(IN_CHECKOUT):] if recorded.startswith(IN_CHECKOUT) else Path(recorded)


def digests(paths: Iterable[str | os.PathLike[str]]) -> dict[str, str]:
    """``{recorded path: digest}`` of ``paths`` (:func:`recorded_path`; a path named twice appears once)."""
    return {recorded_path(p): path_digest(p) for p in paths}


def changed(recorded: Mapping[str, str]) -> list[str]:
    """The paths of ``recorded`` (``{path: digest}`` as :func:`digests` gives it) whose content is no longer the one
    recorded. A path that cannot be read now (a dangling symlink, no permission) counts as changed."""
    out = []
    for path, digest in recorded.items():
        try:
            now = path_digest(local_path(path))
        except (OSError, ValueError):
            now = None
        if now != digest:
            out.append(path)
    return out
