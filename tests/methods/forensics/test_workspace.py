"""The in-memory workspace: jail, whitelist, output cap, content-addressed snapshots."""

from __future__ import annotations

import pytest

from agentmill.methods.forensics.workspace import OUTPUT_CAP, Workspace, WorkspaceError, normalise


def test_normalise_keeps_paths_inside_the_root() -> None:
    assert normalise("./a/../b.txt") == "b.txt"
    assert normalise("/secrets/number.txt") == "secrets/number.txt"
    assert normalise("a/b/../../c") == "c"
    for bad in ("../x", "a/../../x", "/../etc/passwd", ""):
        with pytest.raises(WorkspaceError):
            normalise(bad)


def test_builtins_and_whitelist() -> None:
    ws = Workspace.from_files({"a.txt": "hello", "d/.hidden": "h", "d/b.txt": "b"}, canned={"validate a.txt": "3 rows"},
                              actions={"submit --ok": "done"})
    assert ws.run("cat a.txt") == ("hello", None)
    assert ws.run("ls") == ("a.txt\nd", None)
    assert ws.run("ls -a d") == (".\n..\n.hidden\nb.txt", None)
    assert ws.run("validate   a.txt") == ("3 rows", None)  # whitespace-normalised exact match
    assert ws.run("submit --ok") == ("ok", "done")
    assert ws.run("cp a.txt c.txt") == ("", None) and ws.read("c.txt") == "hello"
    assert ws.run("cat missing.txt")[0] == "cat: missing.txt: no such file"
    for bad in ("bash -c ls", "rm -rf /", "validate b.txt", "cat ../../etc/passwd"):
        with pytest.raises(WorkspaceError):
            ws.run(bad)


def test_host_paths_never_reach_the_host() -> None:
    ws = Workspace()
    out, _ = ws.run("cat /etc/passwd")
    assert "no such file" in out and "root:" not in out


def test_output_cap() -> None:
    ws = Workspace.from_files({"big": "é" * OUTPUT_CAP})  # 2 bytes each: cut mid-stream, still valid text
    out, _ = ws.run("cat big")
    assert len(out.encode()) < OUTPUT_CAP + 40 and out.endswith(f"[output cut at {OUTPUT_CAP} bytes]")


def test_snapshots_are_content_addressed_and_restore() -> None:
    a = Workspace.from_files({"x": "1", "y": "2"})
    b = Workspace.from_files({"y": "2", "x": "1"})
    sid = a.snapshot()
    assert sid == b.snapshot()
    a.run("write z three")
    assert a.snapshot() != sid and a.read("z") == "three"
    a.restore(sid)
    assert not a.exists("z") and a.snapshot() == sid
    with pytest.raises(KeyError):
        a.restore("0" * 64)
