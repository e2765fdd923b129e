"""A snapshot read from git objects: symlinks, binaries, non-UTF-8 and large files; nothing written; path attacks
refused by every tool as text, never as an exception."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentmill.methods.sherloc import RepoSnapshot, SherlocConfig, SnapshotError, Tools


def _git_repo(root: Path) -> str:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("def f():\n    return 1\n")
    (root / "pkg" / "bin.py").write_bytes(b"\x00\x01binary")
    (root / "pkg" / "latin.py").write_bytes(b"s = 'caf\xe9'\n")
    (root / "pkg" / "huge.py").write_text("x = 1\n" * 200)
    os.symlink("/etc/passwd", root / "pkg" / "link.py")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "c"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, env=env, capture_output=True)
    (root / "pkg" / "uncommitted.py").write_text("secret = 1\n")
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_from_git_kinds_and_no_work_tree(tmp_path: Path) -> None:
    commit = _git_repo(tmp_path)
    before = sorted(p.name for p in (tmp_path / "pkg").iterdir())
    snap = RepoSnapshot.from_git(tmp_path, commit, max_file_bytes=500)
    assert snap.kinds["pkg/a.py"] == "text" and snap.kinds["pkg/bin.py"] == "binary"
    assert snap.kinds["pkg/link.py"] == "symlink" and snap.targets["pkg/link.py"] == "/etc/passwd"
    assert snap.kinds["pkg/huge.py"] == "large" and "pkg/latin.py" in snap.non_utf8
    assert not snap.has("pkg/uncommitted.py")  # only committed objects are visible
    assert sorted(p.name for p in (tmp_path / "pkg").iterdir()) == before
    t = Tools(snap, SherlocConfig())
    link = t.view_file("pkg/link.py")
    assert not link.ok and "root:" not in (link.error or "") and "not followed" in link.error
    assert "large file" in t.view_file("pkg/huge.py").error
    with pytest.raises(SnapshotError):
        RepoSnapshot.from_git(tmp_path, "0" * 40)


@pytest.mark.parametrize("path", ["../secret.py", "/etc/passwd", "pkg/../../x.py", "pkg\\a.py", "a\x00.py",
                                  "x" * 5000, "", None, 7])
def test_every_tool_refuses_bad_paths_as_text(path) -> None:
    t = Tools(RepoSnapshot.from_mapping({"pkg/a.py": "x = 1\n"}), SherlocConfig())
    results = [t.view_file(path), t.call({"tool": "view_file", "path": path})]
    if path is not None:  # connected_tree() without a file is the repository summary
        results.append(t.connected_tree(path))
    for r in results:
        assert not r.ok and r.error


def test_empty_view_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="filtered view is empty"):
        Tools(RepoSnapshot.from_mapping({"tests/test_a.py": "x = 1\n"}), SherlocConfig())


def test_search_is_literal_not_regex() -> None:
    t = Tools(RepoSnapshot.from_mapping({"a.py": "x = (a+\n" + "y\n" * 3}), SherlocConfig())
    assert "a.py:1" in t.codebase_search("(A+").output  # regex metacharacters are literal, case-insensitive
    assert "No matches" in t.codebase_search("(a+)*$").output
