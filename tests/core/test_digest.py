from __future__ import annotations

import hashlib
import os

import pytest

from agentmill.core import digest
from agentmill.core.digest import CHECKOUT, MISSING, changed, digests, file_digest, local_path, path_digest


def test_file_digest_is_the_sha256_of_the_bytes_and_follows_a_rewrite(tmp_path) -> None:
    f = tmp_path / "drafter.safetensors"
    f.write_bytes(b"weights v1")
    assert file_digest(f) == hashlib.sha256(b"weights v1").hexdigest()
    f.write_bytes(b"weights v2, longer")
    assert file_digest(f) == hashlib.sha256(b"weights v2, longer").hexdigest()


def test_an_unchanged_file_is_hashed_once_per_process(tmp_path, monkeypatch) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"x" * 10_000)
    calls = []
    real = hashlib.sha256

    def counting(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(digest.hashlib, "sha256", counting)
    first = file_digest(f)
    assert file_digest(f) == first and path_digest(f) == first and len(calls) == 1
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # same bytes, new mtime: read again
    assert file_digest(f) == first and len(calls) == 2


def test_a_directory_digest_sees_a_changed_added_or_renamed_file(tmp_path) -> None:
    d = tmp_path / "drafter"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "sub").mkdir()
    (d / "sub" / "w.bin").write_bytes(b"1")
    seen = {path_digest(d)}
    (d / "sub" / "w.bin").write_bytes(b"2")
    seen.add(path_digest(d))
    (d / "calibration.json").write_text("[]")
    seen.add(path_digest(d))
    (d / "sub" / "w.bin").rename(d / "sub" / "v.bin")
    seen.add(path_digest(d))
    assert len(seen) == 4 and all(s.startswith("dir:") for s in seen)


def test_missing_paths_and_changed(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("a")
    rec = digests([a, b, a])
    assert list(rec) == [str(a), str(b)] and rec[str(b)] == MISSING and changed(rec) == []
    b.write_text("now here")  # an artefact that appears is a change too (a drafter committed later)
    a.write_text("A")
    assert changed(rec) == [str(a), str(b)]
    dangling = tmp_path / "link"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="neither a file nor a directory"):
        path_digest(dangling)
    assert changed({str(dangling): MISSING}) == [str(dangling)]


def test_paths_inside_the_checkout_are_recorded_relative_to_it(tmp_path) -> None:
    """A record made in another clone or a deleted worktree names its shipped artefacts relative to the checkout, so
    this checkout checks them against its own copy; paths outside any checkout stay absolute."""
    inside = CHECKOUT / "pyproject.toml"
    rec = digests([inside, tmp_path / "elsewhere"])
    assert list(rec) == ["<checkout>/pyproject.toml", str(tmp_path / "elsewhere")]
    assert local_path("<checkout>/pyproject.toml") == inside and changed(rec) == []
    other_clone = {"<checkout>/pyproject.toml": rec["<checkout>/pyproject.toml"]}
    assert changed(other_clone) == []
    assert changed({"<checkout>/pyproject.toml": "0" * 64}) == ["<checkout>/pyproject.toml"]
