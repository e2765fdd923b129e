from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentmill.envs.office.files import FileJail, JailError


@pytest.fixture
def jail(tmp_path: Path) -> FileJail:
    (tmp_path / "drive").mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    return FileJail(tmp_path / "drive", max_file_bytes=100, max_total_bytes=250)


def test_read_write_list_move_delete(jail: FileJail) -> None:
    assert jail.write("a/b.txt", "hello") == 5
    assert jail.read("a/b.txt") == "hello"
    assert jail.list_dir(".") == "a/" and jail.list_dir("a") == "b.txt (5 bytes)"
    assert jail.move("a/b.txt", "c.txt") == "c.txt"
    jail.delete("c.txt")
    assert jail.snapshot() == {}


@pytest.mark.parametrize("path", ["../secret.txt", "a/../../secret.txt", "/etc/passwd", "", "a\x00b"])
def test_escapes_refused(jail: FileJail, path: str) -> None:
    with pytest.raises(JailError):
        jail.read(path)
    with pytest.raises(JailError):
        jail.write(path, "x")


def test_absolute_path_inside_the_jail_is_fine(jail: FileJail) -> None:
    jail.write("x.txt", "1")
    assert jail.read(str(jail.root / "x.txt")) == "1"


def test_symlinks_refused_even_inside(jail: FileJail) -> None:
    (jail.root / "out").symlink_to(jail.root.parent / "secret.txt")
    (jail.root / "d").mkdir()
    (jail.root / "in").symlink_to(jail.root / "d", target_is_directory=True)
    for p in ("out", "in/x.txt"):
        with pytest.raises(JailError, match="symlink"):
            jail.read(p)
        with pytest.raises(JailError, match="symlink"):
            jail.write(p, "x")
    assert (jail.root.parent / "secret.txt").read_text() == "outside"


def test_device_and_fifo_refused(jail: FileJail) -> None:
    os.mkfifo(jail.root / "pipe")
    with pytest.raises(JailError, match="not a regular file"):
        jail.read("pipe")


def test_size_caps(jail: FileJail) -> None:
    with pytest.raises(JailError, match="per-file cap"):
        jail.write("big.txt", "x" * 101)
    jail.write("a.txt", "x" * 100)
    jail.write("b.txt", "x" * 100)
    with pytest.raises(JailError, match="cap 250"):
        jail.write("c.txt", "x" * 60)
    jail.write("a.txt", "x" * 40)  # overwriting counts the old size out
    jail.write("c.txt", "x" * 60)


def test_missing_and_directory(jail: FileJail) -> None:
    with pytest.raises(JailError, match="no such file"):
        jail.read("nope.txt")
    (jail.root / "d").mkdir()
    with pytest.raises(JailError, match="directory"):
        jail.read("d")
    with pytest.raises(JailError, match="no such directory"):
        jail.list_dir("nope")


# -- file-count cap and usage accounting (issue 20: 3,000 files made each write cost 49 ms) ----------------------
def test_entry_cap_counts_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "drive").mkdir()
    jail = FileJail(tmp_path / "drive", max_entries=5)
    jail.write("a/b.txt", "1")  # a folder and a file: 2 entries
    jail.write("c.txt", "1")
    jail.write("d.txt", "1")
    with pytest.raises(JailError, match="files and folders; cap 5"):
        jail.write("e/f.txt", "1")  # would be 6
    assert not (jail.root / "e").exists()
    jail.write("e.txt", "1")
    jail.write("e.txt", "overwriting adds nothing")
    with pytest.raises(JailError, match="cap 5"):
        jail.write("g.txt", "1")
    with pytest.raises(JailError, match="cap 5"):
        jail.move("c.txt", "new/c.txt")  # the new folder is an entry too
    jail.delete("d.txt")
    jail.write("g.txt", "1")
    assert jail.entry_count() == 5


def test_writes_do_not_walk_the_drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Usage is counted once and then kept up to date: 100 writes cost one walk, not 100 (the walk made each
    write O(files))."""
    (tmp_path / "drive").mkdir()
    jail = FileJail(tmp_path / "drive")
    for i in range(20):
        jail.write(f"d{i % 3}/f{i}.txt", "seed")
    walks = {"n": 0}
    real_scandir, real_rglob = os.scandir, Path.rglob

    def scandir(p):
        walks["n"] += 1
        return real_scandir(p)

    def rglob(self, pattern):
        walks["n"] += 1
        return real_rglob(self, pattern)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(Path, "rglob", rglob)
    for i in range(100):
        jail.write(f"w/{i}.txt", "x" * i)
    assert walks["n"] <= 4  # one walk: the root and its three folders


def test_kept_usage_matches_a_fresh_count(jail: FileJail) -> None:
    jail.write("a/b.txt", "12345")
    jail.write("a/b.txt", "12")
    jail.write("c/d/e.txt", "abc")
    jail.move("a/b.txt", "x/y/b.txt")
    jail.delete("c/d/e.txt")
    with pytest.raises(JailError):
        jail.write("big.txt", "x" * 101)
    fresh = FileJail(jail.root)
    assert (jail.entry_count(), jail.total_bytes()) == (fresh.entry_count(), fresh.total_bytes()) == (6, 2)
    (jail.root / "outside-write.txt").write_text("seven b")  # another writer, as the SQL tool is
    jail.invalidate_usage()
    assert jail.total_bytes() == 9
