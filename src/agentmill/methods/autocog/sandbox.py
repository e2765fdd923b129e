"""AutoCog's sandbox for untrusted (LLM- or file-supplied) theory and metric code [R] (the repository runs it with
``exec``).

The mechanics live in :mod:`agentmill.core.sandbox`; this module holds AutoCog's values, harnesses and the parent's
checks of their answers. Layers: (1) a static AST policy before anything runs (only ``import numpy [as np]`` /
``import math``; no ``eval``/``exec``/``open``/dunder attributes/``np.random``/file I/O names, no attribute paths to
interpreter internals such as ``np.ma.core.builtins``); (2) a fresh ``python -I`` child with rlimits (CPU 10 s soft /
12 s hard, address space 1 GiB, file size 0, 32 fds, no core) and a parent wall-clock watchdog (20 s); (3) bubblewrap:
read-only ``/usr`` and interpreter only, private ``/tmp``, no network, uid 65534 without capabilities, own pid
namespace; (4) seccomp: no new processes, ``execve`` or sockets; (5) an audit hook (defence in depth). The whole batch
(theory, design, subjects) runs in one child call. The child's answer is data: :func:`validated_batch` and
:func:`validated_metric` check its types, shapes, finiteness and consistency before anything is scored.
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


def _forged(what: str) -> TheoryOutputError:
    return TheoryOutputError(f"sandbox answer rejected: {what} (the child's answer is data, checked by the parent)")


def _finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x)


def validated_batch(res: dict, shape: tuple[int, ...], u, policy: str) -> dict:
    """The parent's check of a theory child's answer (the child can write anything to its pipe): ``probs`` is an
    (S, T) grid of finite P(A) in [0, 1]; ``resps`` is recomputed here from ``probs`` and ``u`` with the harness's
    rule and must equal what the child reported (its later trials' histories were built from them);
    ``renormalised`` is a count. Returns the answer with ``probs``/``resps`` as the parent's own lists."""
    S, T = shape[0], shape[1]
    probs = res.get("probs")
    if not (isinstance(probs, list) and len(probs) == S and all(isinstance(r, list) and len(r) == T for r in probs)):
        raise _forged(f"probs is not a {S}x{T} grid")
    if not all(_finite_number(p) and 0.0 <= p <= 1.0 for r in probs for p in r):
        raise _forged("probs holds a value that is not a finite number in [0, 1]")
    p = np.asarray(probs, dtype=float).reshape(S, T)
    renorm = res.get("renormalised")
    if not (isinstance(renorm, int) and not isinstance(renorm, bool) and 0 <= renorm <= S * T):
        raise _forged("renormalised is not a count of trials")
    if u is None:
        resps: list = [[] for _ in range(S)]
    else:
        uu = np.asarray(u, dtype=float).reshape(S, T)
        if policy == "sample":
            r = np.where(uu < p, 0, 1)
        else:
            r = np.where(p > 0.5, 0, np.where(p < 0.5, 1, np.where(uu < 0.5, 0, 1)))
        resps = r.astype(int).tolist()
    if res.get("resps") != resps:
        raise _forged("resps disagree with probs and the uniforms")
    return {**res, "probs": p.tolist(), "resps": resps}


def run_batch(source: str, A, B, params: dict, *, u=None, policy: str = "sample") -> dict:
    """Run ``predict`` over (S, T) stimuli in one sandboxed child. Returns {probs, resps, renormalised, layers},
    checked by :func:`validated_batch`."""
    check_source(source)
    A, B = np.asarray(A), np.asarray(B)
    if A.ndim < 2 or A.shape[:2] != B.shape[:2]:
        raise ValueError(f"run_batch: A and B must share their (S, T) leading shape, got {A.shape} and {B.shape}")
    req = {"A": A.tolist(), "B": B.tolist(),
           "params": {k: np.asarray(v).tolist() for k, v in params.items()},
           "u": None if u is None else np.asarray(u).tolist(), "policy": policy}
    return validated_batch(run_theory_child(source, CHILD_THEORY, req, name="theory"), A.shape, u, policy)


def validated_metric(res: dict, n_calls: int) -> dict:
    """The parent's check of a metric child's answer: one value (a finite number or None) and one error (None or
    a string) per call, and a value exactly where there is no error."""
    values, errors = res.get("values"), res.get("errors")
    if not (isinstance(values, list) and isinstance(errors, list) and len(values) == len(errors) == n_calls):
        raise _forged(f"values/errors are not {n_calls} entries each")
    for v, e in zip(values, errors):
        if not ((v is None and isinstance(e, str)) or (_finite_number(v) and e is None)):
            raise _forged("a metric value is neither a finite number nor None with an error")
    return {**res, "values": [None if v is None else float(v) for v in values],
            "errors": [None if e is None else e[:300] for e in errors]}


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
    n_calls = 1 + len(dict.fromkeys(np.asarray(columns["subject_id"]).tolist()))  # pooled, then each subject
    return validated_metric(run_theory_child(source, CHILD_METRIC, req, name="metric"), n_calls)


def layers() -> dict:
    """Which isolation layers are active on this machine (``agentmill autocog sandbox-check``)."""
    src = "import numpy as np\ndef predict(params, stimulus, history):\n    return np.array([0.5, 0.5])\n"
    res = run_batch(src, [[[0, 1]]], [[[1, 0]]], {})
    iso = res["layers"]["isolation"]
    return {"ast_policy": True, "subprocess_python_-I": True, "rlimits(cpu,as,fsize,nofile,core)": True,
            "wall_watchdog_s": WALL, "isolation": iso, "bubblewrap_namespaces": iso == "bwrap",
            "seccomp_filter": res["layers"].get("seccomp", False),
            "unshare_user_net_namespace": iso == "bwrap" or res["layers"].get("unshare_net", False),
            "audit_hook": res["layers"].get("audit_hook", False), "answers_validated_by_parent": True}


__all__ = ["CHILD_METRIC", "CHILD_THEORY", "ENTRY_SIGNATURES", "SANDBOX_LIMITS", "SANDBOX_POLICY", "SandboxError",
           "SandboxMemory", "SandboxTimeout", "SandboxViolation", "TheoryCompileError", "TheoryOutputError",
           "TheoryRejected", "check_source", "layers", "run_batch", "run_metric", "run_theory_child",
           "theory_errors", "validated_batch", "validated_metric"]
