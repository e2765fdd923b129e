"""The repair workspace: a copy of the buggy tree an agent may read, edit, test and submit, confined by a FileJail.

Tools (each returns an office :class:`~agentmill.envs.office.tools.ToolResult`; a bad call is ``ok=False`` with the
reason, never an exception):

- ``files()``: the workspace's text files (``.py``, ``.cfg``, ``.toml``, ``.txt``, ``.rst``) as a mapping;
- ``view(path)``: one file;
- ``edit(path, old, new)``: exact search/replace that must match exactly once, in a source file of the package
  (tests, ``conftest.py``, configuration and ``.pth`` files are refused: a patch that edits the tests to pass is a
  reward hack);
- ``run_tests(ids)``: the sandboxed oracle on the current edits, restricted to the given test files or node ids;
- ``submit()``: the full oracle (FAIL_TO_PASS ∪ PASS_TO_PASS), with test files always taken from the base.

Paths go through :class:`~agentmill.envs.office.files.FileJail` (no ``..``, absolute paths or symlinks).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentmill.envs.office.files import FileJail, JailError
from agentmill.envs.office.tools import ToolResult, truncate_output
from agentmill.envs.pyrepo.corpus import PyRepo
from agentmill.envs.pyrepo.mutate import RepoTask
from agentmill.envs.pyrepo.oracle import TestReport, copy_tree

TEXT_SUFFIXES = (".py", ".cfg", ".toml", ".txt", ".rst")


@dataclass(frozen=True)
class SubmitResult:
    resolved: bool
    report: TestReport
    changed_files: tuple[str, ...]


class RepairWorkspace:
    """A fresh copy of ``task``'s buggy tree in a temp dir (removed by :meth:`close`)."""

    def __init__(self, repo: PyRepo, task: RepoTask, *, output_limit: int = 8000) -> None:
        self.repo, self.task = repo, task
        self._tmp = Path(tempfile.mkdtemp(prefix="agentmill-ws-"))
        self.root = copy_tree(repo.root, self._tmp / "repo", task.bug_files)
        self.jail = FileJail(self.root, max_file_bytes=2 << 20, max_total_bytes=200 << 20, max_entries=20_000)
        self._source = set(repo.source_files())
        self.output_limit = output_limit
        self.edits = 0
        self.test_runs = 0

    def __enter__(self) -> RepairWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def files(self) -> dict[str, str]:
        out = {}
        for p in sorted(self.root.rglob("*")):
            if p.is_file() and not p.is_symlink() and p.suffix in TEXT_SUFFIXES and ".git" not in p.parts:
                out[p.relative_to(self.root).as_posix()] = p.read_text(encoding="utf-8", errors="replace")
        return out

    def read(self, path: str) -> str:
        """The whole text of one file (``JailError`` for a refused path)."""
        return self.jail.read(path)

    def view(self, path: str, call_id: str = "") -> ToolResult:
        try:
            return ToolResult(call_id, "view", True, truncate_output(self.jail.read(path), self.output_limit))
        except JailError as e:
            return ToolResult(call_id, "view", False, "", str(e))

    def edit(self, path: str, old: str, new: str, call_id: str = "") -> ToolResult:
        def err(msg: str) -> ToolResult:
            return ToolResult(call_id, "edit", False, "", msg)
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            return err("edit needs non-empty 'old' text and a 'new' text")
        try:
            p = self.jail.resolve(path)
            rel = self.jail.rel(p)
            if rel not in self._source:
                return err(f"{path!r} is not a source file of the package; only these may be edited "
                           f"(tests and configuration are read-only)")
            text = self.jail.read(rel)
        except JailError as e:
            return err(str(e))
        n = text.count(old)
        if n != 1:
            return err(f"'old' text occurs {n} times in {rel}; it must match exactly once")
        try:
            self.jail.write(rel, text.replace(old, new, 1))
        except JailError as e:
            return err(str(e))
        self.edits += 1
        return ToolResult(call_id, "edit", True, f"edited {rel}")

    def changes(self) -> dict[str, str]:
        """Source files whose text differs from the base release (the bug included)."""
        out = {}
        for rel in self._source:
            cur = (self.root / rel).read_text(encoding="utf-8", errors="replace")
            if cur != self.repo.read(rel):
                out[rel] = cur
        return out

    def run_tests(self, ids: Sequence[str] | None = None, call_id: str = "") -> ToolResult:
        """Sandboxed pytest on the current source edits (tests from the base), limited to ``ids``."""
        ids = list(ids or [])
        for i in ids:
            f = i.split("::", 1)[0]
            if not isinstance(i, str) or f.startswith("/") or ".." in Path(f).parts:
                return ToolResult(call_id, "run_tests", False, "", f"bad test id {i!r}")
        self.test_runs += 1
        rep = self.repo.run_tests(self.changes(), ids or None)
        failed = rep.failed()
        lines = [f"{len(rep.passed())} passed, {len(failed)} failed ({rep.status})"]
        lines += [f"FAILED {f}\n{rep.reprs.get(f, '')[-600:]}" for f in failed[:5]]
        return ToolResult(call_id, "run_tests", rep.status == "ok", truncate_output("\n".join(lines),
                                                                                    self.output_limit),
                          None if rep.status == "ok" else rep.detail)

    def submit(self) -> SubmitResult:
        changes = self.changes()
        rep = self.repo.run_tests(changes)
        return SubmitResult(rep.all_pass(self.task.fail_to_pass + self.task.pass_to_pass), rep,
                            tuple(sorted(changes)))
