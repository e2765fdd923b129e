"""The generic sandbox: static policy, limits enforced in a one-shot child, and the persistent child (many calls, a
call that times out or dies is killed and the next call gets a fresh child, the child is reaped on exit).

The policies here load no numpy, so a child starts in tens of milliseconds."""

from __future__ import annotations

import dataclasses
import glob
import os
import tempfile
import time

import pytest

from agentmill.core.sandbox import (FORBIDDEN_NAMES, SAFE_BUILTINS, CodeCompileError, CodeOutputError, CodeRejected,
                                    SandboxError, SandboxLimits, SandboxMemory, SandboxPolicy, SandboxSession,
                                    SandboxTimeout, SandboxViolation, check_source, run_child)

MATH = SandboxPolicy(imports=("math",), namespace=(("math", "math"),))
FAST = SandboxLimits(wall_s=5, cpu_s=3, cpu_hard_s=4, memory_bytes=256 << 20)
FILES = SandboxPolicy(forbidden_names=FORBIDDEN_NAMES - {"open"}, builtins=SAFE_BUILTINS + ("open",), files="tmpdir")
SQRT = "import math\ndef f(x):\n    return math.sqrt(x)\n"
SPIN = "def f():\n    while True:\n        pass\n"


def call(source: str, *args, policy: SandboxPolicy = MATH, limits: SandboxLimits = FAST, **kw) -> object:
    return run_child(source, request={"function": "f", "args": list(args)}, policy=policy, limits=limits,
                     **kw)["result"]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture()
def private_tmp(tmp_path, monkeypatch):
    """Sandbox temp dirs go under a private dir, so other processes' sandboxes in /tmp cannot disturb the checks."""
    root = tmp_path / "sbx"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.mark.parametrize(("source", "reason"), [
    ("import os\ndef f():\n    return 1\n", "import of 'os' is not allowed (math only)"),
    ("from math import sqrt\ndef f():\n    return 1\n", "'from … import' is not allowed"),
    ("def f():\n    return eval('1')\n", "name 'eval' is not allowed"),
    ("def f():\n    return __builtins__\n", "name '__builtins__' is not allowed"),
    ("def f():\n    return ().__class__\n", "attribute '__class__' is not allowed (underscore)"),
    ("x = 0\ndef f():\n    global x\n", "global/nonlocal are not allowed"),
])
def test_static_policy_rejects_before_anything_runs(source, reason, private_tmp) -> None:
    with pytest.raises(CodeRejected) as e:
        call(source)
    assert e.value.reason == reason and e.value.kind == "rejected"
    assert list(private_tmp.iterdir()) == []  # no child was started


def test_static_policy_knobs_and_entry() -> None:
    numpyish = SandboxPolicy(forbidden_attrs=frozenset({"load"}), forbidden_attr_prefixes=("save",))
    with pytest.raises(CodeRejected, match="'savez' is not allowed"):
        check_source("def f(np):\n    np.savez('x')\n", numpyish)
    with pytest.raises(CodeRejected, match="'load' is not allowed"):
        check_source("def f(np):\n    np.load('x')\n", numpyish)
    check_source("def f(np):\n    np.loads('x')\n", numpyish)
    with pytest.raises(CodeCompileError, match=r"must define predict\(a, b\)"):
        check_source("def g():\n    pass\n", numpyish, entry="predict", signature="predict(a, b)")
    with pytest.raises(CodeCompileError, match="syntax error"):
        check_source("def f(:\n", numpyish)
    with pytest.raises(ValueError):
        SandboxPolicy(files="anywhere")
    with pytest.raises(ValueError):
        SandboxLimits(cpu_s=5, cpu_hard_s=4)


def test_one_shot_child_answers_and_leaves_nothing(private_tmp) -> None:
    res = run_child(SQRT, request={"function": "f", "args": [16]}, policy=MATH, limits=FAST, tmp_prefix="t-sbx-")
    assert res["result"] == 4.0 and res["layers"]["audit_hook"] is True
    assert list(private_tmp.iterdir()) == []


def test_print_never_reaches_the_answer_pipe_and_is_capped() -> None:
    assert call("def f():\n    print('hello')\n    return 2\n") == 2
    with pytest.raises(CodeOutputError, match="larger than 1 MiB"):
        call("def f():\n    print('y' * (1 << 21))\n    return 2\n")


def test_errors_inside_the_source_are_output_or_compile_errors() -> None:
    with pytest.raises(CodeOutputError, match="ZeroDivisionError"):
        call("def f():\n    return 1 / 0\n")
    with pytest.raises(CodeCompileError, match="NameError"):
        call("x = undefined_name\ndef f():\n    return 1\n")
    with pytest.raises(CodeCompileError, match="must define f"):
        call("def g():\n    return 1\n")


def test_wall_clock_timeout_kills_the_child(private_tmp) -> None:
    t0 = time.monotonic()
    with pytest.raises(SandboxTimeout, match="wall clock limit 1 s"):
        call(SPIN, limits=SandboxLimits(wall_s=1, cpu_s=5, cpu_hard_s=6))
    assert time.monotonic() - t0 < 3 and list(private_tmp.iterdir()) == []


def test_cpu_limit() -> None:
    with pytest.raises(SandboxTimeout, match="CPU limit 1 s"):
        call(SPIN, limits=SandboxLimits(wall_s=10, cpu_s=1, cpu_hard_s=2))


def test_memory_limit() -> None:
    with pytest.raises(SandboxMemory, match="MemoryError"):
        call("def f():\n    return len('x' * (1 << 30))\n")


def test_an_import_not_preloaded_is_a_violation() -> None:
    # email.message_from_string imports email.parser lazily: a new import after the audit hook froze sys.modules
    policy = SandboxPolicy(imports=("email",))
    with pytest.raises(SandboxViolation, match="import of email.parser is not allowed"):
        call("import email\ndef f():\n    return str(email.message_from_string('a: b'))\n", policy=policy)


@pytest.mark.parametrize("body", ["socket.socket()", "socket.getaddrinfo(b'localhost', 80)",
                                  "socket.create_connection((b'127.0.0.1', 9), timeout=1)"])
def test_network_is_a_violation(body) -> None:
    with pytest.raises(SandboxViolation, match="sandbox: socket"):
        call(f"import socket\ndef f():\n    {body}\n    return 1\n", policy=SandboxPolicy(imports=("socket",)))


def test_files_only_under_the_temp_dir(tmp_path) -> None:
    inside = "def f():\n    open('note.txt', 'w').write('hi')\n    return open('note.txt').read()\n"
    assert call(inside, policy=FILES, limits=SandboxLimits(max_file_bytes=1 << 20)) == "hi"
    outside = tmp_path / "outside.txt"
    with pytest.raises(SandboxViolation, match="outside the temp dir"):
        call(f"def f():\n    open({str(outside)!r}, 'w').write('x')\n", policy=FILES,
             limits=SandboxLimits(max_file_bytes=1 << 20))
    with pytest.raises(SandboxViolation, match="outside the temp dir"):
        call("def f():\n    return open('../escape.txt', 'w')\n", policy=FILES,
             limits=SandboxLimits(max_file_bytes=1 << 20))
    assert not outside.exists()
    with pytest.raises(CodeOutputError, match="File too large"):  # RLIMIT_FSIZE
        call("def f():\n    open('big', 'wb').write(b'x' * 65536)\n", policy=FILES,
             limits=SandboxLimits(max_file_bytes=1024))
    with pytest.raises(SandboxViolation, match="file access is not allowed"):
        call("def f():\n    return open('note.txt', 'w')\n", policy=dataclasses.replace(FILES, files="none"))


def test_session_serves_many_calls_from_one_child(private_tmp) -> None:
    with SandboxSession(policy=MATH, limits=FAST) as s:
        for i in range(40):
            assert s.call(SQRT, {"function": "f", "args": [i * i]})["result"] == i
        assert s.children_started == 1
        pid = s.pid
        assert not gone(pid) and len(list(private_tmp.iterdir())) == 1
    assert gone(pid) and list(private_tmp.iterdir()) == []


def test_session_timeout_kills_the_child_and_the_next_call_gets_a_fresh_one(private_tmp) -> None:
    with SandboxSession(policy=MATH, limits=FAST) as s:
        assert s.call(SQRT, {"function": "f", "args": [4]})["result"] == 2
        first = s.pid
        t0 = time.monotonic()
        with pytest.raises(SandboxTimeout, match="wall clock limit 0.5 s"):
            s.call(SPIN, {"function": "f"}, timeout_s=0.5)
        assert time.monotonic() - t0 < 2
        assert s.pid is None and gone(first)
        assert s.call(SQRT, {"function": "f", "args": [9]})["result"] == 3
        assert s.pid != first and s.children_started == 2
    assert list(private_tmp.iterdir()) == []


def test_session_kills_on_violation_memory_and_crash_but_not_on_a_user_error() -> None:
    policy = SandboxPolicy(imports=("math", "socket"))
    with SandboxSession(policy=policy, limits=FAST) as s:
        s.call(SQRT, {"function": "f", "args": [1]})
        pid = s.pid
        with pytest.raises(CodeOutputError):
            s.call("def f():\n    return 1 / 0\n", {"function": "f"})
        assert s.pid == pid  # an ordinary error in the source: the child is fine
        with pytest.raises(SandboxViolation):
            s.call("import socket\ndef f():\n    return socket.socket()\n", {"function": "f"})
        assert s.pid is None and gone(pid)
        with pytest.raises(SandboxMemory):
            s.call("def f():\n    return len('x' * (1 << 30))\n", {"function": "f"})
        assert s.pid is None
        assert s.call(SQRT, {"function": "f", "args": [16]})["result"] == 4
    with SandboxSession("sys.exit(3)\n", policy=MATH, limits=FAST) as crashing:
        with pytest.raises(SandboxError, match=r"child died \(exit 3\)"):
            crashing.call(SQRT)
        assert crashing.pid is None
        with pytest.raises(SandboxError, match=r"child died \(exit 3\)"):
            crashing.call(SQRT)
        assert crashing.children_started == 2


@pytest.mark.slow
def test_session_cpu_limit_is_per_call() -> None:
    burn = "import time\ndef f(s):\n    t = time.process_time()\n    while time.process_time() - t < s:\n        pass\n"
    policy = SandboxPolicy(imports=("time",))
    with SandboxSession(policy=policy, limits=SandboxLimits(wall_s=10, cpu_s=1, cpu_hard_s=1)) as s:
        for _ in range(5):  # 2.25 s of CPU in all, more than any one call's cap (cpu_s + 1 s of rounding)
            s.call(burn, {"function": "f", "args": [0.45]})
        assert s.children_started == 1
        with pytest.raises(SandboxTimeout, match="CPU limit 1 s"):
            s.call(SPIN, {"function": "f"})


def test_session_reaps_its_child_when_closed_without_a_with_block() -> None:
    s = SandboxSession(policy=MATH, limits=FAST)
    s.call(SQRT, {"function": "f", "args": [1]})
    pid = s.pid
    s.close()
    assert gone(pid) and s.pid is None
    assert s.call(SQRT, {"function": "f", "args": [4]})["result"] == 2  # usable again
    pid = s.pid
    del s
    assert gone(pid)


def test_one_shot_temp_dirs_under_the_prefix_are_removed(private_tmp) -> None:
    with pytest.raises(SandboxTimeout):
        call(SPIN, limits=SandboxLimits(wall_s=0.5, cpu_s=5, cpu_hard_s=6), tmp_prefix="mine-")
    assert glob.glob(str(private_tmp / "mine-*")) == []
