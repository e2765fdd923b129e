"""The in-memory jailed workspace that episode mode runs in: files as content-addressed blobs, snapshots, and a
fixed whitelist of simulated commands — never a real shell, never the host file system.

- Files: ``path -> sha256`` over a blob store ``sha256 -> text``; paths are normalised (``./a/../b`` → ``b``) and
  must stay under the workspace root: an absolute path is read relative to the root, and ``..`` above it is refused
  (:class:`WorkspaceError`).
- Snapshots: :meth:`Workspace.snapshot` returns the sha256 of the canonical tree (sorted ``path: blob`` pairs) and
  keeps the tree under that id; :meth:`Workspace.restore` brings it back. Equal trees give equal ids, so a replay
  that reaches the same state can be checked by id alone.
- Commands (:meth:`Workspace.run`): ``ls [-a] [DIR]``, ``cat FILE``, ``cp SRC DST``, ``write FILE TEXT``,
  ``rm FILE``, plus *canned* commands registered by the environment (an exact command line and its output, e.g.
  ``validate records.csv``) and *action* commands (an exact command line that ends the episode with one of the
  environment's actions). Anything else is refused with the whitelist in the message. Outputs are capped at 8 KB and
  each command at 5 s of wall time.
- Nothing read from a file or a tool output is executed or used as a host path.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

OUTPUT_CAP = 8192
"""Bytes of a command's output kept (the rest is cut, with a note)."""
TIME_LIMIT_S = 5.0
"""Wall-time limit of one simulated command."""
BUILTINS = ("ls", "cat", "cp", "write", "rm")


class WorkspaceError(ValueError):
    """A path outside the jail, a command outside the whitelist, or a command over its time limit."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def normalise(path: str) -> str:
    """``path`` relative to the root, normalised; refuses a path that leaves the root."""
    p = path.strip()
    if not p or "\x00" in p:
        raise WorkspaceError(f"bad path {path!r}")
    norm = posixpath.normpath("/" + p.lstrip("/")) if not p.startswith("/") else posixpath.normpath(p)
    # normpath("/../x") is "/x": detect an escape by walking the parts instead
    depth = 0
    for part in p.strip("/").split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise WorkspaceError(f"path {path!r} leaves the workspace")
        elif part not in ("", "."):
            depth += 1
    return norm.lstrip("/") or "."


@dataclass
class Workspace:
    """An in-memory file tree with whitelisted simulated commands (see the module docstring)."""

    files: dict[str, str] = field(default_factory=dict)
    """``path -> blob sha256``."""
    blobs: dict[str, str] = field(default_factory=dict)
    """``sha256 -> text`` (shared by snapshots)."""
    canned: dict[str, str] = field(default_factory=dict)
    """Exact command lines the environment answers with a fixed output."""
    actions: dict[str, str] = field(default_factory=dict)
    """Exact command lines that end the episode with an environment action (``command -> action``)."""
    snapshots: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_files(cls, files: Mapping[str, str], *, canned: Mapping[str, str] | None = None,
                   actions: Mapping[str, str] | None = None) -> Workspace:
        ws = cls(canned=dict(canned or {}), actions=dict(actions or {}))
        for p, text in files.items():
            ws.write(p, text)
        return ws

    # -- files ----------------------------------------------------------------------------------------------------
    def write(self, path: str, text: str) -> None:
        p = normalise(path)
        sha = _sha(text)
        self.blobs.setdefault(sha, text)
        self.files[p] = sha

    def read(self, path: str) -> str:
        p = normalise(path)
        if p not in self.files:
            raise FileNotFoundError(f"{path}: no such file")
        return self.blobs[self.files[p]]

    def exists(self, path: str) -> bool:
        return normalise(path) in self.files

    def listdir(self, path: str = ".", *, hidden: bool = False) -> list[str]:
        d = normalise(path)
        prefix = "" if d == "." else d + "/"
        names = sorted({p[len(prefix):].split("/")[0] for p in self.files if p.startswith(prefix)})
        if d != "." and not names:
            raise FileNotFoundError(f"{path}: no such directory")
        return [n for n in names if hidden or not n.startswith(".")]

    # -- snapshots ------------------------------------------------------------------------------------------------
    def snapshot(self) -> str:
        """The tree's content id (sha256 of the sorted ``path: blob`` pairs); the tree is kept for :meth:`restore`."""
        tree = dict(sorted(self.files.items()))
        sid = _sha(json.dumps(tree, sort_keys=True, separators=(",", ":")))
        self.snapshots.setdefault(sid, tree)
        return sid

    def restore(self, snapshot_id: str) -> None:
        if snapshot_id not in self.snapshots:
            raise KeyError(f"no snapshot {snapshot_id[:12]} in this workspace")
        self.files = dict(self.snapshots[snapshot_id])

    # -- commands -------------------------------------------------------------------------------------------------
    def whitelist(self) -> list[str]:
        return [*BUILTINS, *sorted(self.canned), *sorted(self.actions)]

    def run(self, command: str) -> tuple[str, str | None]:
        """Run one command line: ``(output, action)`` where ``action`` is the environment action it takes (None for
        an ordinary command). Refused commands raise :class:`WorkspaceError`; a missing file is an error *output*
        (the agent sees it), as a shell would print it."""
        line = " ".join(command.strip().split())
        t0 = time.perf_counter()
        if line in self.actions:
            return "ok", self.actions[line]
        if line in self.canned:
            return _cap(self.canned[line]), None
        try:
            argv = shlex.split(line)
        except ValueError as e:
            raise WorkspaceError(f"cannot parse command {command!r}: {e}") from None
        if not argv or argv[0] not in BUILTINS:
            raise WorkspaceError(f"command {command!r} is not allowed here; allowed: {', '.join(self.whitelist())}")
        try:
            out = self._builtin(argv)
        except FileNotFoundError as e:
            out = f"{argv[0]}: {e}"
        if time.perf_counter() - t0 > TIME_LIMIT_S:
            raise WorkspaceError(f"command {command!r} exceeded its {TIME_LIMIT_S:g} s limit")
        return _cap(out), None

    def _builtin(self, argv: list[str]) -> str:
        cmd, args = argv[0], argv[1:]
        if cmd == "ls":
            hidden = "-a" in args
            rest = [a for a in args if not a.startswith("-")]
            names = self.listdir(rest[0] if rest else ".", hidden=hidden)
            return "\n".join(([".", ".."] if hidden else []) + names)
        if cmd == "cat":
            if len(args) != 1:
                raise WorkspaceError("usage: cat FILE")
            return self.read(args[0])
        if cmd == "cp":
            if len(args) != 2:
                raise WorkspaceError("usage: cp SRC DST")
            self.write(args[1], self.read(args[0]))
            return ""
        if cmd == "write":
            if len(args) < 2:
                raise WorkspaceError("usage: write FILE TEXT")
            self.write(args[0], " ".join(args[1:]))
            return ""
        if cmd == "rm":
            if len(args) != 1:
                raise WorkspaceError("usage: rm FILE")
            p = normalise(args[0])
            if p not in self.files:
                raise FileNotFoundError(f"{args[0]}: no such file")
            del self.files[p]
            return ""
        raise WorkspaceError(f"command {cmd!r} is not allowed")  # unreachable: checked by run()


def _cap(text: str) -> str:
    b = text.encode()
    if len(b) <= OUTPUT_CAP:
        return text
    return b[:OUTPUT_CAP].decode("utf-8", errors="ignore") + f"\n[output cut at {OUTPUT_CAP} bytes]"


__all__ = ["BUILTINS", "OUTPUT_CAP", "TIME_LIMIT_S", "Workspace", "WorkspaceError", "normalise"]
