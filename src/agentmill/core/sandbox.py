"""Running untrusted (LLM- or file-supplied) Python code in a limited child process.

Several methods run code they did not write: AutoCog's theories and metrics, coding agents' programs, KernelPro's
kernels, Metis tools. This module holds the mechanics they share; each caller supplies its own policy values, its
own *harness* (the child-side code that calls into the untrusted source and writes one JSON answer) and its own
error reporting.

Layers:

1. a static AST check before anything runs (:func:`check_source`): only the ``SandboxPolicy.imports`` may be
   imported (``import x [as y]``; never ``from … import``), no name in ``forbidden_names`` or starting ``__``, no
   attribute starting ``_`` or in ``forbidden_attrs`` / with a ``forbidden_attr_prefixes`` prefix, no
   ``global``/``nonlocal``;
2. a fresh ``python -I`` child in its own session with rlimits (``SandboxLimits``: CPU soft/hard seconds, address
   space, file size, open files, no core file), started in a fresh temp dir as its working directory, with a
   minimal environment (one BLAS thread), and a parent wall-clock watchdog that kills the whole process group;
3. the operating-system boundary (:mod:`agentmill.core.bubblewrap`): the child runs under bubblewrap as uid
   65534 in fresh user/mount/pid/network/IPC/UTS namespaces with no capabilities and no new privileges; it sees
   ``/usr`` and the interpreter's own directories read-only, its own ``/proc`` and a size-capped private ``/tmp``
   (its working directory) and nothing else of the machine; its network has only an empty loopback;
4. a seccomp filter (:mod:`agentmill.core.seccomp`) the child installs on itself before the source runs: no new
   processes, no ``execve``, no sockets, no ``ptrace``/``process_vm_*``, no namespaces;
5. an audit hook (installed after the policy's modules are imported) that rejects sockets, subprocess/exec/fork/
   spawn, ctypes, os-level file mutation, frame and ``gc`` walking, setting function code, any new import, and every
   file open — or, with ``files="tmpdir"``, every open outside the working dir; the source runs with a curated set
   of builtins and an ``__import__`` that only returns already-loaded modules of the allowed packages; ``print``
   goes to a capped sink, never the answer pipe.

:func:`run_child` runs one source in one fresh child. :class:`SandboxSession` keeps one child alive for many small
calls (JSON lines over its stdin/stdout), each call with its own time limit; after a timeout, a crash, a memory
error or a violation the child is killed and the next call starts a fresh one.

Layers 1 and 5 are defence in depth: CPython audit hooks are not a security mechanism (PEP 578), and code that
reaches interpreter internals can remove them. The boundary is layers 2–4, which the kernel enforces. A child can
still write anything to its answer pipe, so an answer is data the caller validates (types, shapes, finiteness,
consistency), never a verdict. Calls of one session share an interpreter (a call can leave state behind for the
next). Without bubblewrap the sandbox refuses to run unless ``AGENTMILL_SANDBOX=python-only`` accepts layers 1, 2,
4 and 5 alone.
"""

from __future__ import annotations

import ast
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentmill.core import bubblewrap, seccomp


class SandboxError(Exception):
    """Base of every sandbox failure; ``kind`` names the failure in records and error rows."""

    kind = "error"


class CodeRejected(SandboxError):
    """The static policy refused the source; nothing was run."""

    kind = "rejected"

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(f"{reason}" + (f" (line {line})" if line else ""))
        self.reason, self.line = reason, line


class CodeCompileError(SandboxError):
    """The source does not parse, lacks its entry function, or raised while it was being defined."""

    kind = "compile"


class CodeOutputError(SandboxError):
    """The source ran but raised, or its answer failed the harness's checks."""

    kind = "output"


class SandboxTimeout(SandboxError):
    kind = "timeout"


class SandboxMemory(SandboxError):
    kind = "memory"


class SandboxUnavailable(RuntimeError):
    """The operating-system boundary cannot run on this machine (and ``AGENTMILL_SANDBOX`` does not accept less).

    Not a :class:`SandboxError`: callers treat those as a fault of the code they ran (an LLM's candidate is re-asked,
    a theory scored as failed), whereas this is the machine's, and must stop the run instead of failing every
    candidate quietly."""

    kind = "unavailable"


class SandboxViolation(SandboxError):
    """The source tried something the run-time layer forbids (a file, a socket, a process, an import)."""

    kind = "violation"


ERRORS_BY_KIND: dict[str, type[SandboxError]] = {"compile": CodeCompileError, "output": CodeOutputError,
                                                 "memory": SandboxMemory, "violation": SandboxViolation}
"""The class raised in the parent for each ``kind`` a harness passes to ``fail`` (unknown kinds: SandboxError)."""

FORBIDDEN_NAMES = frozenset({"eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr",
                             "setattr", "delattr", "input", "breakpoint"})
"""Builtins that evaluate strings, reach namespaces or attributes by name, or touch files."""

INTERNAL_ATTRS = FORBIDDEN_NAMES | frozenset({
    # modules that lead to the real builtins, the interpreter, the OS or the garbage collector (np.ma.core.builtins)
    "builtins", "sys", "os", "posix", "gc", "inspect", "ctypes", "subprocess", "importlib", "io", "shutil", "socket",
    "signal", "threading", "multiprocessing", "pickle", "marshal", "runpy", "resource", "pathlib", "tempfile", "mmap",
    "weakref", "warnings", "traceback", "linecache", "atexit",
    # frames, generators' frames, code objects and tracebacks (frame walking)
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "gi_frame", "gi_code", "cr_frame",
    "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "co_code", "co_consts"})
"""Attributes no source may use, whatever its policy: they reach interpreter internals through allowed modules."""

SAFE_BUILTINS = ("abs", "all", "any", "bool", "dict", "enumerate", "float", "int", "len", "list", "max", "min",
                 "range", "round", "sorted", "sum", "tuple", "zip", "reversed", "isinstance", "ValueError",
                 "ZeroDivisionError", "Exception", "map", "filter", "pow", "divmod", "set", "str", "print")
"""The builtins a source sees by default (everything else, ``__import__`` aside, is absent)."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What a source may name (checked statically) and what its child may load and open at run time."""

    imports: tuple[str, ...] = ()
    """Modules the source may ``import``; imported in the child before the audit hook freezes ``sys.modules``."""
    namespace: tuple[tuple[str, str], ...] = ()
    """(name, module) pairs bound in the source's globals and the harness's before the source runs."""
    preload: tuple[str, ...] = ()
    """Further modules imported before the hook because allowed modules import them lazily (``numpy.ma``); the
    source cannot import them by name (the static check), the allowed modules' own code can."""
    forbidden_names: frozenset[str] = FORBIDDEN_NAMES
    """Names the source may not use (any name starting ``__`` is refused as well)."""
    forbidden_attrs: frozenset[str] = frozenset()
    """Attributes the source may not use (any attribute starting ``_`` is refused as well)."""
    forbidden_attr_prefixes: tuple[str, ...] = ()
    """Attribute prefixes the source may not use (``save`` for numpy's writers)."""
    builtins: tuple[str, ...] = SAFE_BUILTINS
    """Builtins the source sees."""
    files: Literal["none", "tmpdir"] = "none"
    """``none``: every file open is a violation; ``tmpdir``: opens (read or write) only under the child's temp dir,
    each file capped by ``SandboxLimits.max_file_bytes``. os-level file mutation (remove, rename, mkdir) stays
    blocked either way."""

    def __post_init__(self) -> None:
        if self.files not in ("none", "tmpdir"):
            raise ValueError(f"SandboxPolicy.files must be 'none' or 'tmpdir', not {self.files!r}")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource caps of one child (rlimits) and the parent's wall-clock watchdog."""

    wall_s: float = 20.0
    """Parent watchdog: the process group is killed after this many seconds (per call in a session)."""
    cpu_s: int = 10
    """RLIMIT_CPU soft limit in seconds (SIGXCPU); in a session, per call."""
    cpu_hard_s: int = 12
    """RLIMIT_CPU hard limit of a one-shot child. A session leaves the hard limit as inherited so that each call can
    get its own soft limit; its calls are bounded by ``cpu_s`` and the watchdog."""
    memory_bytes: int = 1 << 30
    """RLIMIT_AS (address space) in bytes."""
    max_file_bytes: int = 0
    """RLIMIT_FSIZE in bytes: 0 means no file can grow at all."""
    max_open_files: int = 32
    """RLIMIT_NOFILE."""
    tmp_bytes: int = 16 << 20
    """Size of the child's private ``/tmp`` (a tmpfs under bubblewrap): all its files together."""

    def __post_init__(self) -> None:
        if not (self.wall_s > 0 and self.cpu_s > 0 and self.cpu_hard_s >= self.cpu_s and self.memory_bytes > 0
                and self.max_file_bytes >= 0 and self.max_open_files > 0 and self.tmp_bytes > 0):
            raise ValueError(f"SandboxLimits out of range: {self}")


def check_source(source: str, policy: SandboxPolicy, *, entry: str | None = None,
                 signature: str | None = None) -> ast.Module:
    """The static layer. Raises CodeCompileError on a syntax error or when ``entry`` (a top-level function name)
    is required and missing (the message shows ``signature``), CodeRejected on a policy violation."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise CodeCompileError(f"syntax error: {e.msg} (line {e.lineno})") from None
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in policy.imports:
                    raise CodeRejected(f"import of {a.name!r} is not allowed ({', '.join(policy.imports)} only)", line)
        elif isinstance(node, ast.ImportFrom):
            raise CodeRejected("'from … import' is not allowed", line)
        elif isinstance(node, ast.Name) and (node.id in policy.forbidden_names or node.id.startswith("__")):
            raise CodeRejected(f"name {node.id!r} is not allowed", line)
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise CodeRejected(f"attribute {node.attr!r} is not allowed (underscore)", line)
            internal = node.attr in INTERNAL_ATTRS and node.attr not in policy.imports  # the policy chose it
            if internal or node.attr in policy.forbidden_attrs or any(node.attr.startswith(p)
                                                                     for p in policy.forbidden_attr_prefixes):
                raise CodeRejected(f"attribute {node.attr!r} is not allowed", line)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise CodeRejected("global/nonlocal are not allowed", line)
    if entry is not None and not any(isinstance(n, ast.FunctionDef) and n.name == entry for n in tree.body):
        raise CodeCompileError(f"source must define {signature or entry + '(...)'}")
    return tree


# The child, part 1: set up the layers. CONFIG is prepended as a JSON literal by _child_script.
CHILD_SETUP = r'''
import io
import os
if CONFIG["session"]:
    import resource  # per-call CPU limits
for _m in CONFIG["imports"] + CONFIG["preload"]:
    __import__(_m)
layers = {"unshare_net": False}
for _name, _mod in CONFIG["namespace"]:
    globals()[_name] = sys.modules[_mod]
ALLOWED_ROOTS = tuple(m.split(".")[0] for m in CONFIG["imports"])
if not CONFIG["bwrap"]:  # under bubblewrap the network namespace is already private (and userns creation refused)
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        layers["unshare_net"] = libc.unshare(0x10000000 | 0x40000000) == 0
    except Exception:
        pass
if not CONFIG["session"]:
    data = sys.stdin.buffer.read()
    req = json.loads(data)
pipe = sys.stdout
out = pipe
class Sink:  # print() is a curated builtin: keep it off the protocol pipe and cap it (huge-output case)
    n = 0
    def write(self, s):
        Sink.n += len(s)
        if Sink.n > 1 << 20:
            raise OverflowError("printed output larger than 1 MiB")
        return len(s)
    def flush(self):
        pass
sys.stdout = Sink()
BLOCK = ("socket.", "subprocess.", "os.system", "os.exec", "os.fork", "os.posix_spawn", "os.spawn", "ctypes.",
         "os.remove", "os.unlink", "os.rename", "os.mkdir", "os.rmdir", "os.chmod", "os.truncate", "shutil.",
         "os.kill", "os.putenv", "os.chdir", "os.link", "os.symlink", "os.listdir", "os.scandir", "glob.")
HOOK_EVENTS = ("object.__getattr__", "object.__setattr__", "object.__delattr__", "sys._getframe",
               "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers",
               "gc.get_referents", "function.__new__", "code.__new__")
ROOT = os.getcwd()
TMPDIR_FILES = CONFIG["files"] == "tmpdir"
if CONFIG["seccomp"]:  # kernel-enforced and irrevocable: fail closed rather than run without it
    if not install_seccomp(CONFIG["seccomp"]):
        raise SystemExit("sandbox: the seccomp filter could not be installed")
    layers["seccomp"] = True
loaded = set(sys.modules)
def hook(event, args):
    if event == "open":
        p = args[0]
        if TMPDIR_FILES and isinstance(p, (str, bytes)):
            p = os.path.realpath(os.fsdecode(p))
            if p.startswith(ROOT + os.sep):
                return
            raise PermissionError("sandbox: file access outside the temp dir is not allowed")
        raise PermissionError("sandbox: file access is not allowed")
    if event == "import" and args[0] not in loaded:
        raise ImportError("sandbox: import of " + str(args[0]) + " is not allowed")
    if event.startswith(BLOCK) or event in HOOK_EVENTS:
        raise PermissionError("sandbox: " + event + " is not allowed")
sys.addaudithook(hook)
layers["audit_hook"] = True
_B = __builtins__.__dict__ if hasattr(__builtins__, "__dict__") else __builtins__
SAFE = {k: _B[k] for k in CONFIG["builtins"]}
IMPORT_ERROR = "sandbox: only " + " and ".join(CONFIG["imports"])
def _imp(name, globals=None, locals=None, fromlist=(), level=0):
    # an allowed package's own C code imports already-loaded submodules through the frame's __import__ (numpy's
    # ndarray.sum imports numpy._core._methods): allow those; the source cannot name them (static check)
    root = name.split(".")[0]
    if root in ALLOWED_ROOTS and name in sys.modules and level == 0:
        return sys.modules[name] if fromlist else sys.modules[root]
    raise ImportError(IMPORT_ERROR)
SAFE["__import__"] = _imp
def new_namespace():
    return {"__builtins__": dict(SAFE), **{n: sys.modules[m] for n, m in CONFIG["namespace"]}}
def run_source(req):
    ns = new_namespace()
    try:
        exec(compile(req["source"], "<" + req.get("entry", "code") + ">", "exec"), ns)
    except MemoryError:
        fail("memory", "MemoryError")
    except Exception as e:
        fail("compile", type(e).__name__ + ": " + str(e))
    return ns
'''

# The child, part 2a: one request from stdin (read before the hook), one answer, exit.
CHILD_ONE_SHOT = r'''
def fail(kind, msg):
    out.write(json.dumps({"ok": False, "kind": kind, "error": msg, "layers": layers})); out.flush(); sys.exit(0)
ns = run_source(req)
'''

# The child, part 2b: one request per stdin line; each answer framed as "<seq> <json>\n". The harness runs once
# per request; its fail() ends the call, not the child.
CHILD_SESSION = r'''
class CallDone(BaseException):
    pass
def fail(kind, msg):
    out.write(json.dumps({"ok": False, "kind": kind, "error": msg, "layers": layers}))
    raise CallDone
HARNESS = compile(CONFIG["harness"], "<harness>", "exec")
stdin = sys.stdin.buffer
pipe.write("0 ready\n")
pipe.flush()
while True:
    line = stdin.readline()
    if not line:
        break
    req = json.loads(line.decode("utf-8"))
    used = resource.getrusage(resource.RUSAGE_SELF)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (int(used.ru_utime + used.ru_stime) + 1 + CONFIG["cpu_s"], hard))
    out = io.StringIO()
    Sink.n = 0
    try:
        ns = run_source(req)
        exec(HARNESS, globals())
    except CallDone:
        pass
    reply = out.getvalue() or json.dumps({"ok": False, "kind": "error", "error": "the harness wrote no answer",
                                          "layers": layers})
    pipe.write(str(req["seq"]) + " " + reply.replace("\n", " ") + "\n")
    pipe.flush()
'''

CALL_HARNESS = r'''
fn = ns.get(req["function"])
if not callable(fn):
    fail("compile", "source must define " + str(req["function"]) + "(...)")
try:
    result = fn(*req.get("args", []), **req.get("kwargs", {}))
    res = json.dumps({"ok": True, "result": result, "layers": layers},
                     default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
except MemoryError:
    fail("memory", "MemoryError")
except RecursionError:
    fail("output", "RecursionError")
except (PermissionError, ImportError) as e:
    fail("violation", str(e))
except Exception as e:
    fail("output", type(e).__name__ + ": " + str(e))
out.write(res); out.flush()
'''
"""The default harness: call ``request["function"](*args, **kwargs)`` of the source; answer ``{"ok", "result"}``
(numpy values become lists). A harness sees ``req`` (the request), ``ns`` (the source's globals), ``out`` (where
its one JSON answer goes), ``fail(kind, msg)``, ``layers``, ``json``, ``sys`` and the policy's namespace names."""


def _child_script(policy: SandboxPolicy, limits: SandboxLimits, harness: str, prelude: str, session: bool,
                  isolation: str) -> str:
    program = seccomp.deny_filter()
    config = {"imports": list(policy.imports), "preload": list(policy.preload),
              "namespace": [list(p) for p in policy.namespace], "builtins": list(policy.builtins),
              "files": policy.files, "session": session, "cpu_s": limits.cpu_s, "bwrap": isolation == "bwrap",
              "seccomp": program.hex() if program else "",
              "harness": harness if session else ""}  # a one-shot child runs the harness as part of its script
    head = f"import sys, json\nCONFIG = json.loads({json.dumps(config)!r})\n"
    return (prelude + head + seccomp.CHILD_INSTALL + CHILD_SETUP
            + (CHILD_SESSION if session else CHILD_ONE_SHOT + harness))


def isolation() -> str:
    """``bwrap`` when bubblewrap runs here; ``python-only`` when ``AGENTMILL_SANDBOX`` accepts less. Raises
    SandboxUnavailable otherwise (the message says how to install it)."""
    try:
        mode = bubblewrap.mode()
    except ValueError as e:
        raise SandboxUnavailable(str(e)) from None
    if mode == "python-only":
        return mode
    why = bubblewrap.probe()
    if why is not None:
        raise SandboxUnavailable(f"cannot run untrusted code: {why}; {bubblewrap.INSTALL_HINT}")
    return "bwrap"


def _apply_limits(limits: SandboxLimits, session: bool) -> None:  # preexec_fn: runs in the child before exec
    import resource

    hard = resource.getrlimit(resource.RLIMIT_CPU)[1] if session else limits.cpu_hard_s
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, hard))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_bytes, limits.max_file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def _popen(script: str, limits: SandboxLimits, session: bool, cwd: str, isolation: str) -> subprocess.Popen:
    """Start the child in its own process group (the watchdog kills the group). Under bubblewrap ``cwd`` is not
    used: the child works in its private ``/tmp``."""
    argv = [sys.executable, "-I", "-c", script]
    if isolation == "bwrap":
        argv = bubblewrap.command(argv, env=CHILD_ENV, tmp_bytes=limits.tmp_bytes)
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                            env=dict(CHILD_ENV), preexec_fn=lambda: _apply_limits(limits, session),
                            start_new_session=True)


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _death(returncode: int | None, stderr: bytes, limits: SandboxLimits) -> SandboxError:
    """The error for a child that ended without an answer (bubblewrap reports a signal death as 128 + signal)."""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        return SandboxTimeout(f"CPU limit {limits.cpu_s} s exceeded")
    tail = stderr.decode(errors="replace")[-300:]
    if "MemoryError" in tail or "Cannot allocate" in tail:
        return SandboxMemory(f"memory limit ({_size(limits.memory_bytes)}) exceeded")
    return SandboxError(f"sandbox child died (exit {returncode}): {tail}")


def _answer(res: Any, isolation: str) -> dict:
    """Raise the matching error for a failed answer; return a successful one. ``layers`` gets the parent's own
    ``isolation`` (what the child says about itself is only what it says)."""
    if not isinstance(res, dict) or "ok" not in res:
        raise SandboxError("sandbox child wrote an answer without 'ok'")
    if res["ok"] is not True:
        raise ERRORS_BY_KIND.get(res.get("kind"), SandboxError)(str(res.get("error"))[:2000])
    layers = res.get("layers")
    res["layers"] = {**(layers if isinstance(layers, dict) else {}), "isolation": isolation}
    return res


def run_child(source: str, harness: str = CALL_HARNESS, request: Mapping[str, Any] | None = None, *,
              policy: SandboxPolicy, limits: SandboxLimits = SandboxLimits(), name: str = "code",
              prelude: str = "", tmp_prefix: str = "agentmill-sbx-") -> dict:
    """Run ``source`` in one fresh child under ``policy`` and ``limits``, then ``harness`` on it, and return the
    harness's JSON answer. ``request`` (JSON-able) reaches the harness as ``req`` (with ``source`` and ``entry``
    = ``name``, the source's file name in tracebacks). ``prelude`` runs first, before any layer (an extra package's
    warm-up). The static check runs first; its errors, a timeout, the memory limit, a violation or a failed answer
    raise the matching :class:`SandboxError`. The temp dir (``tmp_prefix``…) is removed afterwards."""
    check_source(source, policy)
    iso = isolation()
    req = json.dumps({**(request or {}), "source": source, "entry": name}).encode()
    script = _child_script(policy, limits, harness, prelude, session=False, isolation=iso)
    cwd = tempfile.mkdtemp(prefix=tmp_prefix)
    try:
        p = _popen(script, limits, False, cwd, iso)
        try:
            out, err = p.communicate(req, timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise SandboxTimeout(f"wall clock limit {_seconds(limits.wall_s)} s exceeded") from None
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if not out:
        raise _death(p.returncode, err, limits)
    try:
        res = json.loads(out)
    except ValueError:
        raise SandboxError(f"sandbox child wrote malformed output ({len(out)} bytes)") from None
    return _answer(res, iso)


def _seconds(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


class _Child:
    """One live session child: its process, temp dir and the unread tail of its pipes."""

    def __init__(self, script: str, limits: SandboxLimits, tmp_prefix: str, isolation: str) -> None:
        self.cwd = tempfile.mkdtemp(prefix=tmp_prefix)
        self.isolation = isolation
        try:
            self.proc = _popen(script, limits, True, self.cwd, isolation)
        except BaseException:
            shutil.rmtree(self.cwd, ignore_errors=True)
            raise
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)
        self.buf = b""
        self.err = b""

    def exchange(self, data: bytes, deadline: float) -> bytes | None:
        """Write ``data`` and read one answer line; None if the child closed its output (it died). Raises
        TimeoutError at ``deadline`` (monotonic seconds)."""
        p, view, sent = self.proc, memoryview(data), 0
        with selectors.DefaultSelector() as sel:
            sel.register(p.stdout, selectors.EVENT_READ)
            sel.register(p.stderr, selectors.EVENT_READ)
            if data:
                sel.register(p.stdin, selectors.EVENT_WRITE)
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in sel.select(left):
                    if key.fileobj is p.stdin:
                        try:
                            sent += os.write(p.stdin.fileno(), view[sent:sent + 65536])
                        except BrokenPipeError:
                            sent = len(view)
                        if sent == len(view):
                            sel.unregister(p.stdin)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if key.fileobj is p.stderr:
                        self.err = (self.err + chunk)[-4096:]
                        if not chunk:
                            sel.unregister(p.stderr)
                    elif chunk:
                        self.buf += chunk
                    else:
                        return None
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def drain_err(self) -> None:
        """Read what a dead child left on stderr (the tail says whether it ran out of memory)."""
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.err = (self.err + chunk)[-4096:]

    def reap(self) -> None:
        """Kill the child's process group, wait for it, close its pipes and remove its temp dir. Idempotent."""
        _reap(self.proc, self.cwd)


def _reap(proc: subprocess.Popen, cwd: str) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # before wait(): the unreaped pid cannot have been reused
        except ProcessLookupError:
            pass
        proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            f.close()
        except OSError:
            pass
    shutil.rmtree(cwd, ignore_errors=True)


class SandboxSession:
    """One long-lived sandbox child for many small calls, each with its own time limit.

    ``call(source, request)`` sends one JSON line; the child runs the (statically checked) source in a fresh
    namespace and then ``harness`` (default :data:`CALL_HARNESS`), and answers one line. Saves the interpreter and
    package start-up of a fresh child per call. A call that times out, dies, runs out of memory or commits a
    violation has its child killed (the error is raised) and the next call starts a fresh child; a compile or
    output error leaves the child running. Use as a context manager: the child is always killed and reaped on
    exit (and, failing that, when the session is garbage-collected). Calls of one session share an interpreter,
    a temp dir and its files: isolate mutually distrusting callers with separate sessions or :func:`run_child`.
    Not thread-safe.
    """

    def __init__(self, harness: str = CALL_HARNESS, *, policy: SandboxPolicy,
                 limits: SandboxLimits = SandboxLimits(), prelude: str = "", tmp_prefix: str = "agentmill-sbx-",
                 name: str = "code") -> None:
        self.policy, self.limits, self.name, self.tmp_prefix = policy, limits, name, tmp_prefix
        self._harness, self._prelude = harness, prelude
        self._child: _Child | None = None
        self._finalizer: weakref.finalize | None = None
        self._seq = 0
        self.children_started = 0
        """How many children this session has started (1 + restarts after failures)."""

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """Process id of the live child, None before the first call and after a failure or ``close``."""
        return None if self._child is None else self._child.proc.pid

    def call(self, source: str, request: Mapping[str, Any] | None = None, *,
             timeout_s: float | None = None, on_message: Callable[[Any], Any] | None = None) -> dict:
        """Run ``source`` and the harness on ``request`` in the session's child within ``timeout_s`` seconds
        (default ``limits.wall_s``); return the harness's answer or raise the matching :class:`SandboxError`.

        ``on_message`` (default None: no messages) lets a harness ask the parent for something while the call runs
        (a capability broker): a child line ``rpc <json>`` is passed to ``on_message`` as the decoded JSON and its
        return value is written back as one JSON line; the call's time limit covers these round trips."""
        check_source(source, self.policy)
        timeout = self.limits.wall_s if timeout_s is None else timeout_s
        if not timeout > 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        self._seq += 1
        line = json.dumps({**(request or {}), "source": source, "entry": self.name, "seq": self._seq}).encode()
        if b"\n" in line:
            raise ValueError("request encodes with a newline")  # json.dumps never does; a guard for the framing
        child = self._start()
        deadline = time.monotonic() + timeout
        try:
            raw = child.exchange(line + b"\n", deadline)
            while on_message is not None and raw is not None and raw.startswith(b"rpc "):
                try:
                    msg = json.loads(raw[4:])
                except ValueError:
                    msg = None
                try:
                    reply = json.dumps(on_message(msg)).encode()
                except BaseException:
                    self._kill()  # the broker raised: the child is mid-call, out of step with us
                    raise
                raw = child.exchange(reply + b"\n", deadline)
        except TimeoutError:
            self._kill()
            raise SandboxTimeout(f"wall clock limit {_seconds(timeout)} s exceeded") from None
        if raw is None:
            child.proc.wait()
            child.drain_err()
            err = _death(child.proc.returncode, child.err, self.limits)
            self._kill()
            raise err
        seq, _, body = raw.partition(b" ")
        try:
            res = json.loads(body) if seq == str(self._seq).encode() else None
        except ValueError:
            res = None
        if not isinstance(res, dict):
            self._kill()
            raise SandboxError(f"sandbox session out of step: unexpected answer ({len(raw)} bytes)")
        if not res.get("ok") and res.get("kind") not in ("compile", "output"):
            self._kill()
        return _answer(res, child.isolation)

    def close(self) -> None:
        """Kill and reap the child (if any). The session stays usable: a later call starts a fresh child."""
        self._kill()

    def _start(self) -> _Child:
        if self._child is None:
            iso = isolation()
            script = _child_script(self.policy, self.limits, self._harness, self._prelude, session=True,
                                   isolation=iso)
            child = _Child(script, self.limits, self.tmp_prefix, iso)
            self._child = child
            self._finalizer = weakref.finalize(self, _reap, child.proc, child.cwd)
            self.children_started += 1
            try:  # start-up (interpreter, allowed packages) is bounded by wall_s but not charged to the first call
                ready = child.exchange(b"", time.monotonic() + self.limits.wall_s)
            except TimeoutError:
                self._kill()
                raise SandboxTimeout(f"sandbox child did not start within {_seconds(self.limits.wall_s)} s") from None
            if ready is None:
                child.proc.wait()
                child.drain_err()
                err = _death(child.proc.returncode, child.err, self.limits)
                self._kill()
                raise err
            if ready != b"0 ready":
                self._kill()
                raise SandboxError(f"sandbox child wrote before it was ready: {ready[:80]!r}")
        return self._child

    def _kill(self) -> None:
        if self._child is not None:
            self._finalizer.detach()
            self._child.reap()
            self._child = None



@dataclass(frozen=True)
class CommandResult:
    """What :func:`run_command` saw: exit status (negative: killed by that signal), captured output (each capped),
    wall seconds, whether the watchdog fired, and the isolation layers that were active."""

    returncode: int
    stdout: bytes
    stderr: bytes
    wall_s: float
    timed_out: bool
    layers: dict


def run_command(argv: list[str], *, limits: SandboxLimits = SandboxLimits(), stdin: bytes = b"",
                env: Mapping[str, str] | None = None, isolate: bool = False, max_output: int = 1 << 20,
                tmp_prefix: str = "agentmill-cmd-") -> CommandResult:
    """Run a native command (a compiler, a child that loads compiled code) under the same mechanics as
    :func:`run_child` without its Python-only layers: its own session and process group, rlimits set before exec
    (``limits``), a scrubbed environment (:data:`CHILD_ENV` plus ``env``), a fresh temp working directory removed
    afterwards, a wall-clock watchdog that kills the whole group, and stdout/stderr each capped at ``max_output``
    bytes. With ``isolate`` the command also runs in fresh namespaces with no network
    (:mod:`agentmill.core.bubblewrap`; it then works in its private ``/tmp`` and exchanges data only through
    stdin/stdout); when bubblewrap cannot run here this raises :class:`SandboxUnavailable` (with the install hint)
    unless ``AGENTMILL_SANDBOX=python-only`` accepts running without it — never a silent downgrade. ``layers`` says
    which layers were active. Never raises for the command's own failure: the caller turns the result into its own
    verdict."""
    full_env = {**CHILD_ENV, **(env or {})}
    iso = "none"
    if isolate:
        iso = "bwrap" if isolation() == "bwrap" else "none"
    cwd = tempfile.mkdtemp(prefix=tmp_prefix)
    if iso == "bwrap":
        argv = bubblewrap.command(list(argv), env=full_env, tmp_bytes=limits.tmp_bytes)
    t0 = time.perf_counter()
    timed_out = False
    try:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                             env=full_env, preexec_fn=lambda: _apply_limits(limits, False), start_new_session=True)
        try:
            out, err = p.communicate(stdin, timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = p.communicate()
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    layers = {"isolation": iso, "network": "none (namespace)" if iso == "bwrap" else "not isolated",
              "rlimits": f"cpu {limits.cpu_s} s, as {_size(limits.memory_bytes)}, fsize {_size(limits.max_file_bytes)}",
              "nproc": "inactive (watchdog killpg only)", "watchdog_s": limits.wall_s}
    return CommandResult(p.returncode, out[:max_output], err[:max_output], time.perf_counter() - t0, timed_out,
                         layers)


__all__ = ["CALL_HARNESS", "CodeCompileError", "CodeOutputError", "CodeRejected", "CommandResult", "ERRORS_BY_KIND",
           "FORBIDDEN_NAMES", "INTERNAL_ATTRS", "SAFE_BUILTINS", "SandboxError", "SandboxLimits", "SandboxMemory",
           "SandboxPolicy", "SandboxSession", "SandboxTimeout", "SandboxUnavailable", "SandboxViolation",
           "check_source", "isolation", "run_child", "run_command"]
