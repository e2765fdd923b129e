"""Jailed shared drive: every path is resolved and must stay inside the jail root [R]: no tool may touch files outside
the sandbox.

Why each check: ``Path.resolve`` + ``is_relative_to`` stops ``../`` and absolute-path escapes; walking the
components with ``lstat`` refuses symlinks even when they point back inside (a planted symlink is how an attack
would later redirect a write); non-regular files (devices, FIFOs) are refused so a read cannot block; the caps
(1 MB per file, 20 MB and 1,000 files and folders per sandbox) keep a runaway agent from filling the disk or its
inodes.

Why usage is counted, not walked: checking the caps by walking the drive made every write O(files) (3,000 files:
49 ms a write). The jail counts files, folders and bytes once, on first need, then keeps the totals as its own
operations change them; whoever writes under the root by other means (the SQL tool grows ``data/*.db``) calls
``invalidate_usage`` and the next check walks once more.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

MAX_FILE_BYTES = 1 << 20
MAX_TOTAL_BYTES = 20 << 20
MAX_ENTRIES = 1000
"""Files and folders on the drive; a seeded office holds a few dozen."""


class JailError(ValueError):
    """A path or size the jail refuses; the message names the path."""


class FileJail:
    """File operations confined to ``root`` (which must exist)."""

    def __init__(self, root: Path, *, max_file_bytes: int = MAX_FILE_BYTES, max_total_bytes: int = MAX_TOTAL_BYTES,
                 max_entries: int = MAX_ENTRIES):
        self.root = Path(root).resolve()
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.max_entries = max_entries
        self._usage: list[int] | None = None  # [entries, bytes] under root; None: walk on next need

    # -- path checks ------------------------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """The absolute path for ``path`` inside the jail, or ``JailError``."""
        if not isinstance(path, str) or not path.strip():
            raise JailError(f"path must be a non-empty string, got {path!r}")
        if "\x00" in path:
            raise JailError(f"path contains a NUL byte: {path!r}")
        raw = Path(path)
        candidate = raw if raw.is_absolute() else self.root / raw
        # Refuse symlinks on the way down before resolve() follows them.
        cur = self.root
        try:
            rel_parts = candidate.relative_to(self.root).parts if candidate.is_absolute() else raw.parts
        except ValueError:
            raise JailError(f"path {path!r} is outside the shared drive") from None
        for part in rel_parts:
            cur = cur / part
            if part not in ("..", ".") and cur.is_symlink():
                raise JailError(f"path {path!r} goes through a symlink ({cur.relative_to(self.root)}); refused")
        resolved = candidate.resolve()
        if not resolved.is_relative_to(self.root):
            raise JailError(f"path {path!r} is outside the shared drive")
        if resolved.exists() and not (resolved.is_file() or resolved.is_dir()):
            raise JailError(f"path {path!r} is not a regular file or directory; refused")
        return resolved

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix() or "."

    def _regular_file(self, path: str) -> Path:
        p = self.resolve(path)
        if not p.exists():
            raise JailError(f"no such file: {path!r}")
        if p.is_dir():
            raise JailError(f"{path!r} is a directory")
        if not stat.S_ISREG(os.lstat(p).st_mode):
            raise JailError(f"{path!r} is not a regular file; refused")
        return p

    def total_bytes(self) -> int:
        return self._counted()[1]

    def entry_count(self) -> int:
        """Files, folders and anything else under the root (each costs an inode)."""
        return self._counted()[0]

    def invalidate_usage(self) -> None:
        """Something other than this jail wrote under the root: recount on the next check."""
        self._usage = None

    def _counted(self) -> list[int]:
        if self._usage is None:
            entries = size = 0
            stack = [str(self.root)]
            while stack:
                with os.scandir(stack.pop()) as it:
                    for e in it:
                        entries += 1
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            size += e.stat(follow_symlinks=False).st_size
            self._usage = [entries, size]
        return self._usage

    def _new_dirs(self, p: Path) -> int:
        """How many folders creating ``p``'s parent would add."""
        n, d = 0, p.parent
        while d != self.root and not d.exists():
            n, d = n + 1, d.parent
        return n

    def _check_entries(self, new: int, what: str) -> None:
        have = self.entry_count()
        if new and have + new > self.max_entries:
            raise JailError(f"{what} would bring the drive to {have + new} files and folders; cap {self.max_entries}"
                            " (delete or move files first)")

    # -- operations -------------------------------------------------------------------------------------------
    def read(self, path: str) -> str:
        p = self._regular_file(path)
        if p.stat().st_size > self.max_file_bytes:
            raise JailError(f"{path!r} is larger than the {self.max_file_bytes}-byte file cap")
        return p.read_bytes().decode("utf-8", errors="replace")

    def write(self, path: str, content: str) -> int:
        p = self.resolve(path)
        if p == self.root or p.is_dir():
            raise JailError(f"{path!r} is a directory")
        data = content.encode("utf-8")
        if len(data) > self.max_file_bytes:
            raise JailError(f"content for {path!r} is {len(data)} bytes; the per-file cap is {self.max_file_bytes}")
        exists = p.exists()
        old = p.stat().st_size if exists else 0
        total = self.total_bytes() - old + len(data)
        if total > self.max_total_bytes:
            raise JailError(f"writing {path!r} would bring the drive to {total} bytes; cap {self.max_total_bytes}")
        new_dirs = self._new_dirs(p)
        self._check_entries(new_dirs + (not exists), f"writing {path!r}")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        except BaseException:
            self._usage = None  # partly done: recount rather than guess
            raise
        if self._usage is not None:
            self._usage[0] += new_dirs + (not exists)
            self._usage[1] += len(data) - old
        return len(data)

    def list_dir(self, path: str = ".") -> str:
        p = self.resolve(path)
        if not p.is_dir():
            raise JailError(f"no such directory: {path!r}")
        lines = []
        for child in sorted(p.iterdir(), key=lambda c: c.name):
            if child.is_symlink():
                lines.append(f"{child.name} (symlink)")
            elif child.is_dir():
                lines.append(f"{child.name}/")
            else:
                lines.append(f"{child.name} ({child.stat().st_size} bytes)")
        return "\n".join(lines) if lines else "(empty)"

    def delete(self, path: str) -> None:
        p = self._regular_file(path)
        size = p.stat().st_size
        p.unlink()
        if self._usage is not None:
            self._usage[0] -= 1
            self._usage[1] -= size

    def move(self, src: str, dst: str) -> str:
        s = self._regular_file(src)
        d = self.resolve(dst)
        if d.is_dir():
            d = d / s.name
            self.resolve(self.rel(d))
        if d.exists():
            raise JailError(f"destination {dst!r} already exists")
        new_dirs = self._new_dirs(d)
        self._check_entries(new_dirs, f"moving to {dst!r}")
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            s.rename(d)
        except BaseException:
            self._usage = None
            raise
        if self._usage is not None:
            self._usage[0] += new_dirs
        return self.rel(d)

    def snapshot(self) -> dict[str, str]:
        """Relative path → sha256 of every regular file (symlinks listed as ``symlink``)."""
        out: dict[str, str] = {}
        for f in sorted(self.root.rglob("*")):
            if f.is_symlink():
                out[self.rel(f)] = "symlink"
            elif f.is_file():
                out[self.rel(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
        return out

    def wipe(self) -> None:
        """Remove everything under the root (the root itself stays)."""
        self._usage = None
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
