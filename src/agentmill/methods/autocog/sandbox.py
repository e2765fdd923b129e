"""AutoCog's sandbox for untrusted (LLM- or file-supplied) theory and metric code (spec autocog §9).

The mechanics live in :mod:`agentmill.core.sandbox`; this module holds AutoCog's values and harnesses. Layers: (1) a
static AST policy before anything runs (only ``import numpy [as np]`` / ``import math``; no
``eval``/``exec``/``open``/dunder attributes/``np.random``/file I/O names); (2) a fresh ``python -I`` child in its own
session with rlimits (CPU 10 s soft / 12 s hard, address space 1 GiB, file size 0, 32 fds, no core) and a parent
wall-clock watchdog (20 s) that kills the process group; (3) no network: ``unshare(CLONE_NEWUSER|CLONE_NEWNET)``
through ctypes where the kernel allows it, and always an audit hook (installed after numpy/math are imported) that
rejects sockets, file opens, os file mutation, subprocess/exec/fork/spawn, ctypes and any new import. The whole
batch (theory, design, subjects) runs in one child call. Honesty: this contains LLM mistakes and casual misuse; it is
NOT a boundary against a determined attacker (CPython audit hooks are not a security mechanism, PEP 578).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from agentmill.core import sandbox as core
from agentmill.core.sandbox import (FORBIDDEN_NAMES, CodeCompileError, CodeOutputError, CodeRejected, SandboxError,
                                    SandboxLimits, SandboxMemory, SandboxPolicy, SandboxTimeout, SandboxViolation)


class TheoryRejected(CodeRejected):
    """The static policy refused a theory or metric source."""


class TheoryCompileError(CodeCompileError):
    """A theory or metric source does not compile or lacks its entry function."""


class TheoryOutputError(CodeOutputError):
    """A theory or metric ran but raised or answered out of contract (shape, NaN, negative, huge output)."""


FORBIDDEN_ATTRS = frozenset({"random", "load", "save", "savez", "savez_compressed", "savetxt", "fromfile", "tofile",
                             "memmap", "ctypeslib", "lib", "f2py", "testing", "DataSource", "genfromtxt", "loadtxt"})
CPU_SOFT, CPU_HARD, WALL = 10, 12, 20
MEM_BYTES = 1 << 30

SANDBOX_POLICY = SandboxPolicy(
    imports=("numpy", "math"), namespace=(("np", "numpy"), ("math", "math")),
    preload=("numpy.ma",),  # np.unique & co. import it lazily: loaded before the audit hook bans new imports
    forbidden_names=FORBIDDEN_NAMES, forbidden_attrs=FORBIDDEN_ATTRS, forbidden_attr_prefixes=("save",),
    files="none")
"""What theory and metric code may name and load: numpy and math, no numpy file I/O, no ``np.random``."""
SANDBOX_LIMITS = SandboxLimits(wall_s=WALL, cpu_s=CPU_SOFT, cpu_hard_s=CPU_HARD, memory_bytes=MEM_BYTES,
                               max_file_bytes=0, max_open_files=32)
TMP_PREFIX = "autocog-sbx-"

ENTRY_SIGNATURES = {"predict": "predict(params, stimulus, history)", "metric": "metric(data) -> float"}

_AS_THEORY: dict[type[SandboxError], type[SandboxError]] = {CodeRejected: TheoryRejected,
                                                            CodeCompileError: TheoryCompileError,
                                                            CodeOutputError: TheoryOutputError}


@contextlib.contextmanager
def theory_errors() -> Iterator[None]:
    """Re-raise the core sandbox's generic code errors as AutoCog's classes, whose names appear in ledgers, error
    rows and the AC-11 report (``TheoryRejected``, ``TheoryCompileError``, ``TheoryOutputError``)."""
    try:
        yield
    except (CodeRejected, CodeCompileError, CodeOutputError) as e:
        for base, cls in _AS_THEORY.items():
            if isinstance(e, base) and not isinstance(e, cls):
                raise (TheoryRejected(e.reason, e.line) if cls is TheoryRejected else cls(str(e))) from None
        raise


def check_source(source: str, *, entry: str = "predict", extra_imports: tuple[str, ...] = ()):
    """Static policy; raises TheoryCompileError on a syntax error or a missing ``entry`` function (``predict`` for
    theories, ``metric`` for LLM-written metrics), TheoryRejected on a violation. ``extra_imports`` widens the import
    list for a caller whose child script pre-loads those modules (the repository's pandas metrics, ``frame_metric``)."""
    policy = SANDBOX_POLICY
    if extra_imports:
        policy = dataclasses.replace(policy, imports=policy.imports + tuple(extra_imports))
    with theory_errors():
        return core.check_source(source, policy, entry=entry, signature=ENTRY_SIGNATURES.get(entry))


def run_theory_child(source: str, harness: str, request: Mapping[str, Any], *, name: str,
                     policy: SandboxPolicy = SANDBOX_POLICY, prelude: str = "") -> dict:
    """One fresh child under AutoCog's limits running ``source`` and then ``harness`` (a ``CHILD_*`` script);
    errors carry AutoCog's class names."""
    with theory_errors():
        return core.run_child(source, harness, request, policy=policy, limits=SANDBOX_LIMITS, name=name,
                              prelude=prelude, tmp_prefix=TMP_PREFIX)


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


def run_batch(source: str, A, B, params: dict, *, u=None, policy: str = "sample") -> dict:
    """Run ``predict`` over (S, T) stimuli in one sandboxed child. Returns {probs, resps, renormalised, layers}."""
    check_source(source)
    req = {"A": np.asarray(A).tolist(), "B": np.asarray(B).tolist(),
           "params": {k: np.asarray(v).tolist() for k, v in params.items()},
           "u": None if u is None else np.asarray(u).tolist(), "policy": policy}
    return run_theory_child(source, CHILD_THEORY, req, name="theory")


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
    req = {"columns": {k: np.asarray(v).tolist() for k, v in columns.items()},
           "constants": {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
                         for k, v in (constants or {}).items()}}
    return run_theory_child(source, CHILD_METRIC, req, name="metric")


def layers() -> dict:
    """Which isolation layers are active on this machine (``agentmill autocog sandbox-check``)."""
    src = "import numpy as np\ndef predict(params, stimulus, history):\n    return np.array([0.5, 0.5])\n"
    res = run_batch(src, [[[0, 1]]], [[[1, 0]]], {})
    return {"ast_policy": True, "subprocess_python_-I": True, "rlimits(cpu,as,fsize,nofile,core)": True,
            "wall_watchdog_s": WALL, "unshare_user_net_namespace": res["layers"].get("unshare_net", False),
            "audit_hook": res["layers"].get("audit_hook", False)}


__all__ = ["CHILD_METRIC", "CHILD_THEORY", "ENTRY_SIGNATURES", "SANDBOX_LIMITS", "SANDBOX_POLICY", "SandboxError",
           "SandboxMemory", "SandboxTimeout", "SandboxViolation", "TheoryCompileError", "TheoryOutputError",
           "TheoryRejected", "check_source", "layers", "run_batch", "run_metric", "run_theory_child",
           "theory_errors"]
