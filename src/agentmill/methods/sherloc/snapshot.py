"""A read-only repository snapshot held in memory, read from git objects at a fixed commit.

``RepoSnapshot.from_git`` lists the tree with ``git ls-tree -r -z`` and streams every blob through one
``git cat-file --batch`` process: no working tree is written or read, so no tool can see uncommitted files. Symlinks
(mode 120000) keep only their target text and are never followed; submodules (160000) are opaque; files over
``max_file_bytes`` and binary files (a NUL in the first 8 KB) keep a one-line notice; non-UTF-8 text is decoded
with ``errors="replace"`` and flagged. Lines are split once, and lower-cased once, at load (search reuses them).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from agentmill.methods.sherloc.config import SherlocConfig


class SnapshotError(ValueError):
    """A snapshot that cannot be built (not a git repository, unknown commit, too many files)."""


class RepoSnapshot:
    """Files of one commit. ``kinds`` maps path -> text | binary | large | symlink | submodule."""

    def __init__(self, files: Mapping[str, str], *, kinds: Mapping[str, str] | None = None,
                 targets: Mapping[str, str] | None = None, non_utf8: frozenset[str] = frozenset(),
                 commit: str = "", sizes: Mapping[str, int] | None = None) -> None:
        self._text = dict(files)
        self.kinds = {p: "text" for p in self._text}
        self.kinds.update(kinds or {})
        self.targets = dict(targets or {})
        self.non_utf8 = non_utf8
        self.commit = commit
        self.sizes = dict(sizes or {p: len(t.encode("utf-8", errors="replace")) for p, t in self._text.items()})
        self._lines = {p: t.splitlines() for p, t in self._text.items()}
        self._lower = {p: [ln.lower() for ln in ls] for p, ls in self._lines.items()}
        # one lower-cased text per file and its line start offsets: a search is a str.find loop over it
        self._blob = {p: "\n".join(ls) for p, ls in self._lower.items()}
        self._starts: dict[str, list[int]] = {}
        for p, ls in self._lower.items():
            starts, pos = [], 0
            for ln in ls:
                starts.append(pos)
                pos += len(ln) + 1
            self._starts[p] = starts
        h = hashlib.sha256()
        for p in sorted(self.kinds):
            h.update(p.encode() + b"\0" + self.kinds[p].encode() + b"\0")
            h.update(hashlib.sha256(self._text.get(p, self.targets.get(p, "")).encode("utf-8", "replace")).digest())
        self.tree_hash = h.hexdigest()

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, files: Mapping[str, str], *, symlinks: Mapping[str, str] | None = None,
                     binary: Mapping[str, int] | None = None) -> RepoSnapshot:
        """A snapshot from path -> text (tests), plus optional symlinks (path -> target) and binary files
        (path -> size)."""
        kinds = {p: "symlink" for p in (symlinks or {})}
        kinds.update({p: "binary" for p in (binary or {})})
        return cls(files, kinds=kinds, targets=symlinks, sizes={**{p: len(t.encode()) for p, t in files.items()},
                                                                **dict(binary or {})})

    @classmethod
    def from_git(cls, repo: str | Path, commit: str, *, max_file_bytes: int = 1_000_000,
                 max_files: int = 20_000) -> RepoSnapshot:
        repo = Path(repo)
        try:
            ls = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "--full-tree", "-l", commit],
                                capture_output=True, check=True).stdout
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            err = getattr(e, "stderr", b"") or b""
            raise SnapshotError(f"cannot list {commit!r} in {repo}: {err.decode(errors='replace').strip()[:300]}") \
                from None
        entries = []
        for rec in ls.split(b"\0"):
            if not rec:
                continue
            meta, path = rec.split(b"\t", 1)
            mode, kind, sha, size = meta.split()
            entries.append((mode.decode(), kind.decode(), sha.decode(), size.decode(), path.decode("utf-8", "replace")))
        if len(entries) > max_files:
            raise SnapshotError(f"{repo}@{commit[:12]} has {len(entries)} files; max_files is {max_files}")
        kinds: dict[str, str] = {}
        files: dict[str, str] = {}
        targets: dict[str, str] = {}
        sizes: dict[str, int] = {}
        non_utf8: set[str] = set()
        want = []
        for mode, kind, sha, size, path in entries:
            if mode == "160000":
                kinds[path] = "submodule"
            elif mode == "120000":
                kinds[path] = "symlink"
                want.append((sha, path))
            elif int(size) > max_file_bytes:
                kinds[path], sizes[path] = "large", int(size)
            else:
                want.append((sha, path))
        if want:
            p = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"],
                               input=b"".join(s.encode() + b"\n" for s, _ in want), capture_output=True, check=True)
            buf, pos = p.stdout, 0
            for sha, path in want:
                nl = buf.index(b"\n", pos)
                _, _, n = buf[pos:nl].split()
                data = buf[nl + 1: nl + 1 + int(n)]
                pos = nl + 1 + int(n) + 1
                sizes[path] = len(data)
                if kinds.get(path) == "symlink":
                    targets[path] = data.decode("utf-8", "replace")
                elif b"\0" in data[:8192]:
                    kinds[path] = "binary"
                else:
                    try:
                        files[path] = data.decode("utf-8")
                    except UnicodeDecodeError:
                        files[path] = data.decode("utf-8", errors="replace")
                        non_utf8.add(path)
        return cls(files, kinds=kinds, targets=targets, non_utf8=frozenset(non_utf8), commit=commit, sizes=sizes)

    @classmethod
    def from_checkout(cls, repo: str | Path, commit: str) -> RepoSnapshot:
        """The slow path PF-5 compares against: check the commit out into a temp dir and read the files."""
        import os

        top = Path(tempfile.mkdtemp(prefix="sherloc-co-"))
        tmp = top / "tree"
        tmp.mkdir()
        try:  # a private index: the repository's own index and work tree are never touched
            env = {**os.environ, "GIT_INDEX_FILE": str(top / "index")}
            subprocess.run(["git", "-C", str(repo), f"--work-tree={tmp}", "checkout", commit, "--", "."],
                           capture_output=True, check=True, env=env)
            files: dict[str, str] = {}
            for p in tmp.rglob("*"):
                if p.is_file() and not p.is_symlink():
                    data = p.read_bytes()
                    if b"\0" not in data[:8192]:
                        files[p.relative_to(tmp).as_posix()] = data.decode("utf-8", errors="replace")
            return cls(files, commit=commit)
        finally:
            shutil.rmtree(top, ignore_errors=True)

    # -- reading ------------------------------------------------------------------------------------------------
    def all_paths(self) -> list[str]:
        return sorted(self.kinds)

    def has(self, path: str) -> bool:
        return path in self.kinds

    def is_text(self, path: str) -> bool:
        return self.kinds.get(path) == "text"

    def text(self, path: str) -> str:
        return self._text[path]

    def lines(self, path: str) -> list[str]:
        return self._lines[path]

    def lower_lines(self, path: str) -> list[str]:
        return self._lower[path]

    def find_lines(self, path: str, query_lower: str) -> list[int]:
        """1-based numbers of the lines of ``path`` containing ``query_lower`` (already lower-cased; no newline)."""
        import bisect

        blob, starts = self._blob[path], self._starts[path]
        out: list[int] = []
        i = blob.find(query_lower)
        while i >= 0:
            ln = bisect.bisect_right(starts, i)
            out.append(ln)
            nxt = starts[ln] if ln < len(starts) else len(blob)  # skip to the next line: one hit per line
            i = blob.find(query_lower, nxt)
        return out

    def files(self, cfg: SherlocConfig | None = None) -> list[str]:
        """Text files in the filtered view of ``cfg`` (all text files when None)."""
        if cfg is None:
            return sorted(p for p, k in self.kinds.items() if k == "text")
        ex = cfg.excluded
        exts = tuple("." + e for e in cfg.file_extensions)
        out = []
        for p, k in self.kinds.items():
            if k not in ("text", "symlink", "submodule"):
                continue
            parts = PurePosixPath(p).parts
            if any(d in ex for d in parts[:-1]) or not p.endswith(exts):
                continue
            out.append(p)
        return sorted(out)
