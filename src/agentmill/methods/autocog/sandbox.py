"""Subprocess sandbox for untrusted (LLM- or file-supplied) theory code (spec autocog §9).

Layers: (1) a static AST policy before anything runs (only ``import numpy [as np]`` / ``import math``; no
``eval``/``exec``/``open``/dunder attributes/``np.random``/file I/O names); (2) a fresh ``python -I`` child in its own
session with rlimits (CPU 10 s soft / 12 s hard, address space 1 GiB, file size 0, 32 fds, no core) and a parent
wall-clock watchdog (20 s) that kills the process group; (3) no network: ``unshare(CLONE_NEWUSER|CLONE_NEWNET)``
through ctypes where the kernel allows it, and always an audit hook (installed after numpy/math are imported) that
rejects sockets, file opens, os file mutation, subprocess/exec/fork/spawn, ctypes and any new import. The whole
batch (theory, design, subjects) runs in one child call. Honesty: this contains LLM mistakes and casual misuse; it is
NOT a boundary against a determined attacker (CPython audit hooks are not a security mechanism, PEP 578).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np


class SandboxError(Exception):
    kind = "error"


class TheoryRejected(SandboxError):
    kind = "rejected"

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(f"{reason}" + (f" (line {line})" if line else ""))
        self.reason, self.line = reason, line


class TheoryCompileError(SandboxError):
    kind = "compile"


class TheoryOutputError(SandboxError):
    kind = "output"


class SandboxTimeout(SandboxError):
    kind = "timeout"


class SandboxMemory(SandboxError):
    kind = "memory"


class SandboxViolation(SandboxError):
    kind = "violation"


FORBIDDEN_NAMES = {"eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr", "setattr",
                   "delattr", "input", "breakpoint"}
FORBIDDEN_ATTRS = {"random", "load", "save", "savez", "savez_compressed", "savetxt", "fromfile", "tofile", "memmap",
                   "ctypeslib", "lib", "f2py", "testing", "DataSource", "genfromtxt", "loadtxt"}
CPU_SOFT, CPU_HARD, WALL = 10, 12, 20
MEM_BYTES = 1 << 30


def check_source(source: str, *, entry: str = "predict", extra_imports: tuple[str, ...] = ()) -> ast.Module:
    """Static policy; raises TheoryCompileError on a syntax error or a missing ``entry`` function (``predict`` for
    theories, ``metric`` for LLM-written metrics), TheoryRejected on a violation. ``extra_imports`` widens the import
    list for a caller whose child script pre-loads those modules (the repository's pandas metrics, ``frame_metric``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TheoryCompileError(f"syntax error: {e.msg} (line {e.lineno})") from None
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in ("numpy", "math") + tuple(extra_imports):
                    allowed = ", ".join(("numpy", "math") + tuple(extra_imports))
                    raise TheoryRejected(f"import of {a.name!r} is not allowed ({allowed} only)", line)
        elif isinstance(node, ast.ImportFrom):
            raise TheoryRejected("'from … import' is not allowed", line)
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            raise TheoryRejected(f"name {node.id!r} is not allowed", line)
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise TheoryRejected(f"attribute {node.attr!r} is not allowed (underscore)", line)
            if node.attr in FORBIDDEN_ATTRS or node.attr.startswith("save"):
                raise TheoryRejected(f"attribute {node.attr!r} is not allowed", line)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise TheoryRejected("global/nonlocal are not allowed", line)
    if not any(isinstance(n, ast.FunctionDef) and n.name == entry for n in tree.body):
        raise TheoryCompileError(f"source must define {ENTRY_SIGNATURES.get(entry, entry + '(...)')}")
    return tree


ENTRY_SIGNATURES = {"predict": "predict(params, stimulus, history)", "metric": "metric(data) -> float"}


CHILD_PREAMBLE = r'''
import sys, json, math
import numpy as np
import numpy.ma  # np.unique & co. import it lazily: loaded before the audit hook bans new imports
layers = {"unshare_net": False}
EXTRA_MODULES = globals().get("EXTRA_MODULES", {})  # alias -> module, pre-loaded by a prelude (frame_metric)
EXTRA_ROOTS = tuple(m.__name__.split(".")[0] for m in EXTRA_MODULES.values())
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    layers["unshare_net"] = libc.unshare(0x10000000 | 0x40000000) == 0
except Exception:
    pass
data = sys.stdin.buffer.read()
req = json.loads(data)
out = sys.stdout
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
loaded = set(sys.modules)
def hook(event, args):
    if event == "open":
        raise PermissionError("sandbox: file access is not allowed")
    if event == "import" and args[0] not in loaded:
        raise ImportError("sandbox: import of " + str(args[0]) + " is not allowed")
    if event.startswith(BLOCK) or event in ("object.__getattr__",):
        raise PermissionError("sandbox: " + event + " is not allowed")
sys.addaudithook(hook)
layers["audit_hook"] = True
SAFE = {k: __builtins__.__dict__[k] if hasattr(__builtins__, "__dict__") else __builtins__[k] for k in (
    "abs", "all", "any", "bool", "dict", "enumerate", "float", "int", "len", "list", "max", "min", "range", "round",
    "sorted", "sum", "tuple", "zip", "reversed", "isinstance", "ValueError", "ZeroDivisionError", "Exception", "map",
    "filter", "pow", "divmod", "set", "str", "print")}
def _imp(name, globals=None, locals=None, fromlist=(), level=0):
    # numpy's own C code imports already-loaded submodules through the frame's __import__ (ndarray.sum imports
    # numpy._core._methods): allow those; theory source cannot name them (AST policy: numpy/math, no underscores)
    root = name.split(".")[0]
    if root in ("numpy", "math") + EXTRA_ROOTS and name in sys.modules and level == 0:
        return sys.modules[name] if fromlist else sys.modules[root]
    raise ImportError("sandbox: only numpy and math")
SAFE["__import__"] = _imp
ns = {"__builtins__": SAFE, "np": np, "math": math, **EXTRA_MODULES}
def fail(kind, msg):
    out.write(json.dumps({"ok": False, "kind": kind, "error": msg, "layers": layers})); out.flush(); sys.exit(0)
try:
    exec(compile(req["source"], "<" + req.get("entry", "theory") + ">", "exec"), ns)
except MemoryError:
    fail("memory", "MemoryError")
except Exception as e:
    fail("compile", type(e).__name__ + ": " + str(e))
'''

CHILD_THEORY = r'''
predict = ns.get("predict")
A = req["A"]; B = req["B"]; P = req["params"]; U = req.get("u"); policy = req.get("policy", "sample")
S = len(A); probs = []; resps = []; renorm = 0
try:
    for s in range(S):
        hist = {"option_a_ratings": [], "option_b_ratings": [], "response": []}
        ps = {k: (np.asarray(v[s]) if isinstance(v[s], list) else v[s]) for k, v in P.items()}
        prow, rrow = [], []
        for t in range(len(A[s])):
            stim = np.array([A[s][t], B[s][t]], dtype=float)
            p = np.asarray(predict(ps, stim, hist), dtype=float).reshape(-1)
            if p.shape != (2,):
                fail("output", "predict must return 2 probabilities, got shape " + str(p.shape))
            if not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
                fail("output", "predict returned non-finite, negative or zero-sum probabilities: " + str(p.tolist()))
            if abs(p.sum() - 1) > 1e-6:
                renorm += 1
            pa = float(p[0] / p.sum())
            prow.append(pa)
            if U is not None:
                u = U[s][t]
                if policy == "sample":
                    r = 0 if u < pa else 1
                else:
                    r = 0 if pa > 0.5 else (1 if pa < 0.5 else (0 if u < 0.5 else 1))
                rrow.append(r)
                hist["option_a_ratings"].append(A[s][t]); hist["option_b_ratings"].append(B[s][t])
                hist["response"].append(r)
        probs.append(prow); resps.append(rrow)
except MemoryError:
    fail("memory", "MemoryError")
except RecursionError:
    fail("output", "RecursionError")
except (PermissionError, ImportError) as e:
    fail("violation", str(e))
except Exception as e:
    fail("output", type(e).__name__ + ": " + str(e))
res = json.dumps({"ok": True, "probs": probs, "resps": resps, "renormalised": renorm, "layers": layers})
if len(res) > 64 * 1024 * 1024:
    fail("output", "output larger than 64 MiB")
out.write(res); out.flush()
'''

CHILD = CHILD_PREAMBLE + CHILD_THEORY

CHILD_METRIC = r'''
metric = ns.get("metric")
cols = {k: np.asarray(v) for k, v in req["columns"].items()}
const = req.get("constants", {})
sid = cols["subject_id"]
order = []
for x in sid.tolist():
    if x not in order:
        order.append(x)
groups = [np.arange(len(sid))] + [np.flatnonzero(sid == x) for x in order]
values, errors = [], []
for idx in groups:
    data = {k: v[idx].copy() for k, v in cols.items()}  # a fresh copy per call: metrics may mutate their input
    data.update({k: (np.asarray(v) if isinstance(v, list) else v) for k, v in const.items()})
    try:
        x = np.asarray(metric(data), dtype=float)
        if x.size != 1:
            raise TypeError("metric must return one number, got shape " + str(x.shape))
        x = float(x.reshape(-1)[0])
        if not math.isfinite(x):
            raise ValueError("metric returned a non-finite value: " + str(x))
        values.append(x); errors.append(None)
    except MemoryError:
        fail("memory", "MemoryError")
    except RecursionError:
        values.append(None); errors.append("RecursionError")
    except (PermissionError, ImportError) as e:
        fail("violation", str(e))
    except Exception as e:
        values.append(None); errors.append(type(e).__name__ + ": " + str(e)[:200])
out.write(json.dumps({"ok": True, "values": values, "errors": errors, "layers": layers})); out.flush()
'''


def _limits() -> None:  # preexec_fn: runs in the child before exec
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SOFT, CPU_HARD))
    resource.setrlimit(resource.RLIMIT_AS, (MEM_BYTES, MEM_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_batch(source: str, A, B, params: dict, *, u=None, policy: str = "sample") -> dict:
    """Run ``predict`` over (S, T) stimuli in one sandboxed child. Returns {probs, resps, renormalised, layers}."""
    check_source(source)
    req = json.dumps({"source": source, "A": np.asarray(A).tolist(), "B": np.asarray(B).tolist(),
                      "params": {k: np.asarray(v).tolist() for k, v in params.items()},
                      "u": None if u is None else np.asarray(u).tolist(), "policy": policy}).encode()
    return _run_child(CHILD, req)


def run_metric(source: str, columns: dict, constants: dict | None = None) -> dict:
    """Run ``metric(data) -> float`` in one sandboxed child on the pooled rows and then on each subject's rows
    (subjects in order of first appearance). ``columns`` maps column name -> per-row array and must hold
    ``subject_id``; ``constants`` (e.g. ``validities``, ``rating_max``) are added to every call's ``data`` dict.
    Each call gets a fresh copy. Returns {values, errors, layers}: ``values[0]`` pooled, then one per subject, None
    where that call failed (``errors`` says why). A compile error, a policy violation, a timeout or the memory limit
    raises the matching :class:`SandboxError`."""
    check_source(source, entry="metric")
    if "subject_id" not in columns:
        raise ValueError("run_metric: columns must include 'subject_id'")
    req = json.dumps({"source": source, "entry": "metric",
                      "columns": {k: np.asarray(v).tolist() for k, v in columns.items()},
                      "constants": {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
                                    for k, v in (constants or {}).items()}}).encode()
    return _run_child(CHILD_PREAMBLE + CHILD_METRIC, req)


def _run_child(script: str, req: bytes) -> dict:
    """One fresh ``python -I`` child under the limits of the module docstring; parses its JSON answer."""
    cwd = tempfile.mkdtemp(prefix="autocog-sbx-")
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    try:
        p = subprocess.Popen([sys.executable, "-I", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=cwd, env=env, preexec_fn=_limits, start_new_session=True)
        try:
            out, err = p.communicate(req, timeout=WALL)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise SandboxTimeout(f"wall clock limit {WALL} s exceeded") from None
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if p.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not out:
        raise SandboxTimeout(f"CPU limit {CPU_SOFT} s exceeded")
    if not out:
        tail = err.decode(errors="replace")[-300:]
        if "MemoryError" in tail or "Cannot allocate" in tail:
            raise SandboxMemory("memory limit (1 GiB) exceeded")
        raise SandboxError(f"sandbox child died (exit {p.returncode}): {tail}")
    try:
        res = json.loads(out)
    except ValueError:
        raise SandboxError(f"sandbox child wrote malformed output ({len(out)} bytes)") from None
    if not res["ok"]:
        cls = {"compile": TheoryCompileError, "output": TheoryOutputError, "memory": SandboxMemory,
               "violation": SandboxViolation}.get(res["kind"], SandboxError)
        raise cls(res["error"])
    return res


def layers() -> dict:
    """Which isolation layers are active on this machine (``agentmill autocog sandbox-check``)."""
    src = "import numpy as np\ndef predict(params, stimulus, history):\n    return np.array([0.5, 0.5])\n"
    res = run_batch(src, [[[0, 1]]], [[[1, 0]]], {})
    return {"ast_policy": True, "subprocess_python_-I": True, "rlimits(cpu,as,fsize,nofile,core)": True,
            "wall_watchdog_s": WALL, "unshare_user_net_namespace": res["layers"].get("unshare_net", False),
            "audit_hook": res["layers"].get("audit_hook", False)}
