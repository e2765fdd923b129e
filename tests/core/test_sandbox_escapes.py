"""The sandbox against an attacker, layer by layer (issue: hostile input).

The escapes a probe found on the old sandbox are pinned here, with more of the same family. Each layer is tested
on its own by playing an attacker who already got past the layers above it:

* the static policy refuses attribute paths to interpreter internals (``np.ma.core.builtins`` reached the real
  builtins);
* with the static check switched off, the audit hook refuses setting a function's ``__code__`` (the probe replaced
  the hook's own code with a no-op), frame walking and ``gc`` referrers;
* with the static check and the audit hook both switched off (the attacker holds the real builtins and any module),
  the kernel still refuses: bubblewrap hides the user's files and makes the rest read-only, seccomp refuses new
  processes, ``execve`` (also as a raw syscall through ctypes) and sockets, and the pid namespace hides the parent.
"""

from __future__ import annotations

import builtins
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from agentmill.core import bubblewrap, sandbox
from agentmill.core.sandbox import (CodeRejected, SandboxLimits, SandboxPolicy, SandboxUnavailable, SandboxViolation,
                                    check_source, run_child)

LIMITS = SandboxLimits(wall_s=20, cpu_s=8, cpu_hard_s=9, memory_bytes=1 << 30)
NUMPY = SandboxPolicy(imports=("numpy",), namespace=(("np", "numpy"),), preload=("numpy.ma",))
ATTACKER = SandboxPolicy(imports=("numpy", "os", "sys", "subprocess", "socket", "ctypes", "gc"),
                         namespace=(("np", "numpy"),), preload=("numpy.ma",), forbidden_names=frozenset(),
                         builtins=tuple(n for n in dir(builtins) if not n.startswith("_")) + ("__build_class__",))
"""Everything a source could want: the attacker who already holds the real builtins and any module."""


def call(source: str, policy: SandboxPolicy = NUMPY) -> object:
    return run_child(source, request={"function": "f"}, policy=policy, limits=LIMITS)["result"]


@pytest.fixture()
def no_static_check(monkeypatch):
    """Play an attacker past the static policy."""
    monkeypatch.setattr(sandbox, "check_source", lambda source, policy, **kw: None)


@pytest.fixture()
def no_python_layers(monkeypatch, no_static_check):
    """Play an attacker past the static policy and the audit hook (what the probe's escape achieved)."""
    assert "sys.addaudithook(hook)" in sandbox.CHILD_SETUP
    monkeypatch.setattr(sandbox, "CHILD_SETUP", sandbox.CHILD_SETUP.replace("sys.addaudithook(hook)", "pass"))


# --- layer 1: the static policy ------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr", [
    "np.ma.core.builtins",  # the probe's path to the real builtins
    "np.ma.core.builtins.getattr",
    "np.core.os",
    "np.ctypeslib.ctypes",
    "(x for x in ()).gi_frame",
    "(x for x in ()).gi_frame.f_back.f_globals",
    "np.sys.modules",
    "np.compat.py3k.os",
    "math.gc",
    "np.eval",
])
def test_static_policy_refuses_attribute_paths_to_internals(expr) -> None:
    with pytest.raises(CodeRejected, match="is not allowed"):
        check_source(f"import numpy as np\nimport math\ndef f():\n    return {expr}\n",
                     SandboxPolicy(imports=("numpy", "math")))


def test_a_policy_that_imports_a_module_may_use_its_name_as_an_attribute() -> None:
    check_source("import socket\ndef f():\n    return socket.socket\n", SandboxPolicy(imports=("socket",)))


# --- layer 5 alone: the audit hook --------------------------------------------------------------------------------

HOOK_ESCAPE = """import numpy as np
def f():
    b = np.ma.core.builtins
    main = b.__import__("sys").modules["__main__"]
    main.hook.__code__ = {code}
    return "hook replaced"
"""


@pytest.mark.parametrize(("code", "event"), [
    ("(lambda event, args: None).__code__", "object.__getattr__"),  # the probe's way to a no-op's code
    ("b.compile('None', 'x', 'eval')", "object.__setattr__"),  # a code object reached without __getattr__
])
def test_the_probes_hook_replacement_is_a_violation(no_static_check, code, event) -> None:
    with pytest.raises(SandboxViolation, match=event):
        call(HOOK_ESCAPE.format(code=code))


@pytest.mark.parametrize(("body", "event"), [
    ("sys._getframe(0)", "sys._getframe"),
    ("gc.get_referrers(np)", "gc.get_referrers"),
    ("gc.get_objects()", "gc.get_objects"),
    ("sys.settrace(None)", "sys.settrace"),
    ("os.listdir('/')", "os.listdir"),
])
def test_frame_gc_and_os_walking_are_violations(no_static_check, body, event) -> None:
    with pytest.raises(SandboxViolation, match=event.replace(".", r"\.")):
        call(f"import numpy as np\nimport sys\nimport gc\nimport os\ndef f():\n    {body}\n    return 1\n",
             policy=ATTACKER)


# --- layers 2-4: the kernel, with the Python layers gone ----------------------------------------------------------

def attack(body: str) -> object:
    return call("import os\nimport sys\nimport subprocess\nimport socket\nimport ctypes\nimport gc\n"
                "def f():\n" + "".join(f"    {line}\n" for line in body.strip().splitlines()), policy=ATTACKER)


def test_the_attacker_cannot_see_or_delete_the_users_files(no_python_layers, tmp_path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("ssn 078-05-1120")
    res = attack(f"""
out = {{}}
for name, op in [("read", lambda: open({str(secret)!r}).read()), ("delete", lambda: os.remove({str(secret)!r})),
                 ("shell", lambda: subprocess.run(["rm", "-f", {str(secret)!r}]))]:
    try:
        out[name] = ["done", str(op())]
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
out["home"] = os.path.exists(os.path.expanduser("~root/.bashrc")) or os.path.exists("/root/.bashrc")
return out
""")
    assert secret.read_text() == "ssn 078-05-1120"
    assert res["read"][0] == "FileNotFoundError" and res["delete"][0] == "FileNotFoundError"
    assert res["shell"][0] == "PermissionError"  # seccomp: no new process
    assert res["home"] is False


def test_what_the_attacker_sees_is_read_only(no_python_layers) -> None:
    target = Path(sys.prefix) / "agentmill-sandbox-escape-probe.txt"
    try:
        res = attack(f"""
try:
    open({str(target)!r}, "w").write("escaped")
    return "written"
except OSError as e:
    return e.errno
""")
        assert res == 30 and not target.exists()  # EROFS
    finally:
        target.unlink(missing_ok=True)


@pytest.mark.parametrize("body", [
    "return os.fork()",
    "return subprocess.run(['sh', '-c', 'echo escaped'], capture_output=True).stdout",
    "return os.posix_spawn('/bin/sh', ['sh', '-c', 'true'], {})",
    "return os.execv('/bin/sh', ['sh', '-c', 'true'])",
    "return socket.socket()",
])
def test_the_kernel_refuses_new_processes_and_sockets(no_python_layers, body) -> None:
    with pytest.raises(SandboxViolation, match="Operation not permitted"):
        attack(body)


def test_a_raw_execve_through_ctypes_is_refused(no_python_layers) -> None:
    res = attack("""
libc = ctypes.CDLL(None, use_errno=True)
argv = (ctypes.c_char_p * 2)(b"/bin/true", None)
rc = libc.syscall(59 if os.uname().machine == "x86_64" else 221, b"/bin/true", argv, None)
return [rc, ctypes.get_errno()]
""")
    assert res == [-1, 1]  # EPERM: seccomp


def test_the_network_is_an_empty_namespace(no_python_layers) -> None:
    """A real server listens on the host's loopback; the child's loopback is another one (and sockets are refused)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    hits: list = []
    t = threading.Thread(target=lambda: hits.append(srv.accept()), daemon=True)
    t.start()
    try:
        with pytest.raises(SandboxViolation, match="Operation not permitted"):
            attack(f"s = socket.socket()\ns.connect(('127.0.0.1', {port}))\nreturn 1")
        assert not hits
    finally:
        srv.close()


def test_the_parent_and_its_environment_are_out_of_sight(no_python_layers, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_TEST_SECRET", "hunter2")
    res = attack(f"""
pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
status = open("/proc/self/status").read()
caps = [line.split()[1] for line in status.splitlines() if line.startswith("CapEff")]
return {{"pids": pids, "parent_visible": os.path.exists("/proc/{os.getpid()}/environ"),
        "secret": "AGENTMILL_TEST_SECRET" in os.environ, "uid": os.getuid(), "caps": caps,
        "seccomp": [line.split()[1] for line in status.splitlines() if line.startswith("Seccomp:")]}}
""")
    assert res["parent_visible"] is False and res["secret"] is False
    assert max(res["pids"]) < 100 and res["uid"] == 65534  # its own pid namespace; nobody
    assert res["caps"] == ["0000000000000000"] and res["seccomp"] == ["2"]


def test_writes_to_proc_self_stay_inside_the_child(no_python_layers) -> None:
    """``/proc/self`` is the child's own; it cannot reach the parent through it (the parent's pid is not there)."""
    res = attack(f"""
try:
    open("/proc/{os.getpid()}/mem", "r+b")
    return "opened the parent's memory"
except OSError as e:
    return type(e).__name__
""")
    assert res == "FileNotFoundError"


def test_a_forged_answer_is_only_data(no_python_layers) -> None:
    """The child owns its answer pipe: it can write ``ok: true`` with anything, so callers validate answers
    (AutoCog's checks are in tests/methods/autocog/test_sandbox_escapes.py). The parent's ``isolation`` overrides
    what the child claims about its layers."""
    res = run_child("import os\nimport sys\ndef f():\n    return 1\n",
                    harness='out.write(json.dumps({"ok": True, "result": "forged", "layers": {"isolation": "none"}}))',
                    request={}, policy=ATTACKER, limits=LIMITS)
    assert res["result"] == "forged" and res["layers"]["isolation"] == "bwrap"


# --- modes ---------------------------------------------------------------------------------------------------------

def test_without_bubblewrap_the_sandbox_refuses_to_run(monkeypatch) -> None:
    monkeypatch.setattr(bubblewrap, "probe", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.delenv(bubblewrap.ENV_MODE, raising=False)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        call("def f():\n    return 1\n")


def test_python_only_mode_is_an_explicit_choice_and_keeps_seccomp(monkeypatch) -> None:
    monkeypatch.setattr(bubblewrap, "probe", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.setenv(bubblewrap.ENV_MODE, "python-only")
    res = run_child("def f():\n    return 1\n", request={"function": "f"}, policy=NUMPY, limits=LIMITS)
    assert res["result"] == 1 and res["layers"]["isolation"] == "python-only" and res["layers"]["seccomp"] is True
    monkeypatch.setenv(bubblewrap.ENV_MODE, "off")
    with pytest.raises(SandboxUnavailable, match="AGENTMILL_SANDBOX='off'"):
        call("def f():\n    return 1\n")


def test_the_private_tmp_is_capped(monkeypatch) -> None:
    files = SandboxPolicy(forbidden_names=sandbox.FORBIDDEN_NAMES - {"open"}, builtins=sandbox.SAFE_BUILTINS + ("open", "bytes"),
                          files="tmpdir")
    limits = SandboxLimits(wall_s=20, cpu_s=8, cpu_hard_s=9, max_file_bytes=1 << 20, tmp_bytes=2 << 20)
    src = ("def f():\n    n = 0\n    for i in range(10):\n        with open('f' + str(i), 'wb') as h:\n"
           "            h.write(bytes(1 << 20))\n        n += 1\n    return n\n")
    with pytest.raises(sandbox.CodeOutputError, match="No space left"):
        run_child(src, request={"function": "f"}, policy=files, limits=limits)



def test_an_interpreter_under_tmp_stays_visible(monkeypatch, tmp_path) -> None:
    """CI clones into /tmp, so its virtualenv lives there: the private /tmp is mounted before the interpreter's
    directories are bound, or it would hide them (bwrap: execvp .../python: No such file or directory)."""
    import subprocess

    root = tmp_path / "venv-like"
    root.mkdir()
    (root / "marker.txt").write_text("visible")
    monkeypatch.setattr(bubblewrap, "python_roots", lambda: [str(root)])
    argv = bubblewrap.command(["/usr/bin/cat", str(root / "marker.txt")], env={}, tmp_bytes=1 << 20)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert (p.returncode, p.stdout) == (0, "visible"), p.stderr


def test_run_command_with_isolate_refuses_rather_than_running_unisolated(monkeypatch) -> None:
    """``run_command(isolate=True)`` on a machine where bubblewrap cannot run raises with the install hint; only the
    explicit ``python-only`` mode runs the command without namespaces (and says so in ``layers``)."""
    monkeypatch.setattr(bubblewrap, "probe", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.delenv(bubblewrap.ENV_MODE, raising=False)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.run_command(["true"], isolate=True)
    monkeypatch.setenv(bubblewrap.ENV_MODE, "python-only")
    r = sandbox.run_command(["true"], isolate=True)
    assert r.returncode == 0 and r.layers["isolation"] == "none"
