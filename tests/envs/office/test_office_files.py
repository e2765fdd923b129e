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
