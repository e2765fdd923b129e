"""The sandboxed pytest oracle contains what a patch or test does: writes outside its copy, sockets off loopback,
a disk-filling test, a memory bomb, a test that never ends, a fork loop. Each is reported, none crashes the run."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from agentmill.envs.pyrepo.oracle import SandboxLimits, TestReport, layers, run_pytest


def _repo(tmp_path: Path, test_source: str) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_x.py").write_text(test_source)
    return root


def test_escapes_are_contained(tmp_path: Path) -> None:
    outside = Path(__file__).parent / f"agentmill-escape-{uuid.uuid4().hex}"  # a host folder the sandbox lacks
    src = f'''
import os, socket, pytest

def test_write_outside_fails():
    with pytest.raises(OSError):
        open({str(outside)!r}, "w").write("x")
    with pytest.raises(OSError):
        open("/usr/agentmill-escape", "w").write("x")  # bound read-only

def test_repo_copy_is_writable_but_private():
    open("mine.txt", "w").write("ok")

def test_no_network_off_loopback():
    with pytest.raises(OSError):
        socket.create_connection(("1.1.1.1", 53), timeout=2)

def test_loopback_works():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
    c = socket.create_connection(s.getsockname(), timeout=2); c.close(); s.close()

def test_disk_fill_hits_the_cap():
    with pytest.raises(OSError):
        with open("big.bin", "wb") as f:
            for _ in range(64):
                f.write(b"0" * (1 << 20))

def test_memory_bomb_raises():
    with pytest.raises(MemoryError):
        b"x" * (8 << 30)
'''
    root = _repo(tmp_path, src)
    rep = run_pytest(root, targets=["tests"], limits=SandboxLimits(wall_s=60, tmp_bytes=32 << 20))
    assert rep.status == "ok", rep.detail
    assert rep.failed() == [], {k: rep.reprs.get(k, "")[-300:] for k in rep.failed()}
    assert len(rep.passed()) == 6
    assert not outside.exists()
    assert sorted(os.listdir(root)) == ["tests"]  # nothing written back into the tree it was given


def test_a_test_that_never_ends_is_killed(tmp_path: Path) -> None:
    root = _repo(tmp_path, "def test_forever():\n    while True:\n        pass\n")
    rep = run_pytest(root, targets=["tests"], limits=SandboxLimits(wall_s=2))
    assert rep.status == "timeout" and "killed" in rep.detail and rep.wall_s < 10


def test_a_fork_loop_is_stopped_by_the_watchdog(tmp_path: Path) -> None:
    src = ("import os, time\n\ndef test_forks():\n    for _ in range(100000):\n        if os.fork() == 0:\n"
           "            time.sleep(60)\n            os._exit(0)\n")
    root = _repo(tmp_path, src)
    rep = run_pytest(root, targets=["tests"], limits=SandboxLimits(wall_s=2))
    assert rep.status in ("timeout", "ok", "crashed")  # contained either way: by the watchdog or a failed fork
    assert rep.wall_s < 15


def test_report_and_layers_shape() -> None:
    r = TestReport(outcomes={"a": "passed", "b": "failed"})
    assert r.failed() == ["b"] and not r.all_pass(["a", "b"]) and r.all_pass(["a"])
    assert "not a boundary against a determined attacker" in layers()["boundary"]
