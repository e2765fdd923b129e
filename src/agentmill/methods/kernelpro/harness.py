"""The run child: loads one built kernel with ctypes, calls it on the parent's inputs and times it interleaved with
the numpy reference. References for correctness never enter this process: the child returns outputs and input
digests and the parent (``wall.py``) compares them with its float64 references.

Protocol (stdin → stdout, both binary): 8 bytes of header length, a JSON header, then an ``.npz`` holding the
shared object's bytes (``so``) and every input array. The answer is an ``.npz`` (read with ``allow_pickle=False``:
the child's bytes are data, never code) holding the outputs plus a JSON blob ``meta``."""

from __future__ import annotations

import io
import json
import signal
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from agentmill.core.sandbox import SandboxLimits, run_command
from agentmill.methods.kernelpro.numba_backend import NUMBA_CPU, NUMBA_CPU_FEATURES

EAGER = {"vadd": "a[0] + a[1]", "axpy": "np.float32(2.5) * a[0] + a[1]",
         "gelu": "np.float32(0.5) * a[0] * (np.float32(1) + np.tanh(np.float32(0.7978846) * (a[0] + "
                 "np.float32(0.044715) * a[0] * a[0] * a[0])))",
         "sum": "a[0].sum(keepdims=True)", "transpose": "a[0].T.copy()",
         "softmax_rows": "(lambda e: e / e.sum(axis=1, keepdims=True))(np.exp(a[0] - a[0].max(axis=1, keepdims=True)))",
         "layernorm": "(lambda x, m: (x - m) / np.sqrt(((x - m) ** 2).mean(axis=1, keepdims=True) + np.float32(1e-5))"
                      " * a[1] + a[2])(a[0], a[0].mean(axis=1, keepdims=True))",
         "stencil5": "(lambda x, p: np.float32(0.5) * x + np.float32(0.125) * (p[:-2, 1:-1] + p[2:, 1:-1] + "
                     "p[1:-1, :-2] + p[1:-1, 2:]))(a[0], np.pad(a[0], 1))",
         "gemm": "a[0] @ a[1]", "empty": "None"}
"""[R] The numpy-eager formulation of each task, timed beside candidates in the child (its correctness is tested
against ``tasks.TASKS[...].ref32``)."""

CHILD = r'''
import sys, json, ctypes, time, hashlib, io, os
import numpy as np
raw = sys.stdin.buffer.read()
hl = int.from_bytes(raw[:8], "little")
H = json.loads(raw[8:8 + hl])
Z = np.load(io.BytesIO(raw[8 + hl:]), allow_pickle=False)
P = ctypes.c_void_p; I64 = ctypes.c_int64
SENTINEL = 0x7FC0DEAD  # a NaN payload no arithmetic produces: an element still holding it was never written
def sha(x):
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]
for jn, job in enumerate(H["jobs"]):
    A = {k: Z[k] for k in Z.files if not k.startswith("so")}  # fresh copies: a job that mutates inputs cannot taint the next
    EAGER = job.get("eager", H.get("eager"))
    ref = eval("lambda a: " + EAGER, {"np": np}) if EAGER and EAGER != "None" else None
    OUT = {}
    META = {"cases": [], "timing": []}
    fn = None
    if job.get("so"):
        path = os.path.abspath(f"k{jn}.so")
        with open(path, "wb") as f:
            f.write(Z[job["so"]].tobytes())
        fn = ctypes.CDLL(path).kernel
        fn.restype = None
        def mk(ins, out, dims):
            return tuple([P(x.ctypes.data) for x in ins] + [P(out.ctypes.data)] + [I64(d) for d in dims])
    elif job.get("py"):  # a numba candidate: compiled here, inside the sandbox, for its one signature
        try:
            import math, numba
            t0 = time.perf_counter()
            g = {"np": np, "numba": numba, "math": math}
            exec(compile(job["py"], "<candidate>", "exec"), g)
            nf = numba.njit(fastmath=bool(job["fastmath"]), boundscheck=False, cache=False)(g["kernel"])
            arr = numba.types.Array(numba.types.float32, 1, "C")
            sig = tuple([arr] * (job["n_in"] + 1) + [numba.types.int64] * job["n_dims"])
            nf.compile(sig)
            META["compile_s"] = time.perf_counter() - t0
            META["asm"] = nf.inspect_asm(sig)
            META["cpu_name"] = numba.config.CPU_NAME or "host"
            fn = nf
        except Exception as e:
            META["compile_error"] = f"{type(e).__name__}: {str(e)[:1500]}"
        def mk(ins, out, dims):
            return tuple([x.reshape(-1) for x in ins] + [out.reshape(-1)] + [int(d) for d in dims])
    def call(ins, out, dims):
        fn(*mk(ins, out, dims))
    for i, c in enumerate(job.get("cases", H.get("cases", [])) if fn is not None else []):
        ins = [A[k] for k in c["inputs"]]
        out = np.empty(c["out_shape"], dtype=np.float32); out.view(np.uint32).fill(SENTINEL)
        call(ins, out, c["dims"])
        after = [sha(x) for x in ins]
        out2 = np.empty(c["out_shape"], dtype=np.float32); out2.view(np.uint32).fill(SENTINEL)
        call(ins, out2, c["dims"])
        OUT[f"case{i}"] = out
        META["cases"].append({"in_sha_after": after, "deterministic": bool(out.tobytes() == out2.tobytes())})
    for j, t in enumerate(job.get("timing", H.get("timing", [])) if "compile_error" not in META else []):
        sets = [[A[k] for k in s] for s in t["sets"]]
        dims, shape = t["dims"], t["out_shape"]
        for w in range(job["warmup"]):
            o = np.full(shape, np.nan, dtype=np.float32)
            if fn is not None:
                call(sets[w % len(sets)], o, dims)
            if ref is not None:
                ref(sets[w % len(sets)])
        o = np.empty(shape, dtype=np.float32)
        t0 = time.perf_counter()
        if fn is not None:
            call(sets[0], o, dims)
        else:
            ref(sets[0])
        t1 = max(time.perf_counter() - t0, 1e-7)
        m = max(1, min(10000, int(t["min_batch_s"] / t1) + 1))
        nb = min(m, 8)
        outs = [np.empty(shape, dtype=np.float32) for _ in range(nb)]
        tc, tr, nan_bad = [], [], 0
        # argument tuples built once (outside the timed region): call q uses input set q % len(sets), buffer q % nb
        period = len(sets) * nb // __import__("math").gcd(len(sets), nb)
        argv = [mk(sets[q % len(sets)], outs[q % nb], dims) for q in range(period)] if fn is not None else []
        if m % period:
            m = m + period - m % period
        start = time.perf_counter()
        rng = np.random.default_rng(t["seed"])
        while True:
            for o in outs:
                o.view(np.uint32).fill(SENTINEL)
            if fn is not None:
                t0 = time.perf_counter_ns()
                for q in range(m):
                    fn(*argv[q % len(argv)])
                tc.append((time.perf_counter_ns() - t0) / m * 1e-9)
                nan_bad += int(sum(int((o.view(np.uint32) == SENTINEL).sum()) for o in outs))
            if ref is not None and t.get("with_ref", True):
                t0 = time.perf_counter_ns()
                for q in range(m):
                    ref(sets[q % len(sets)])
                tr.append((time.perf_counter_ns() - t0) / m * 1e-9)
            k = len(tc) or len(tr)
            if k >= t["max_repeats"] or time.perf_counter() - start > t["budget_s"]:
                break
            if k >= t["min_repeats"]:
                x = np.asarray(tc or tr)
                med = np.median(x)
                boot = np.median(x[rng.integers(0, len(x), (200, len(x)))], axis=1)
                if np.std(boot) / med <= t["rse"]:
                    break
        if fn is not None:
            for q in range(min(nb, len(sets))):
                OUT[f"timed{j}_{q}"] = outs[q]
        META["timing"].append({"cand_s": tc, "ref_s": tr, "batch": m, "nan_in_timed": nan_bad,
                               "timed_sets": [(b + nb * ((m - 1 - b) // nb)) % len(sets)
                                              for b in range(min(nb, len(sets)))] if fn else []})
    OUT["meta"] = np.frombuffer(json.dumps(META).encode(), dtype=np.uint8)
    b = io.BytesIO(); np.savez(b, **OUT); v = b.getvalue()
    sys.stdout.buffer.write(len(v).to_bytes(8, "little") + v); sys.stdout.flush()
'''

RUN_LIMITS = SandboxLimits(wall_s=20.0, cpu_s=20, cpu_hard_s=22, memory_bytes=4 << 30, max_file_bytes=64 << 20,
                           max_open_files=64, tmp_bytes=64 << 20)
"""[R] Run child caps per job: address space 4 GiB, CPU and wall 20 s, files 64 MiB (the shared objects only)."""


class RunFailure(Exception):
    """The child ended without a readable answer: ``kind`` is ``crashed: SIGSEGV``, ``timeout``, ``memory`` …"""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}{': ' + detail if detail else ''}")
        self.kind, self.detail = kind, detail


def run_batch(so_paths: list[str | None], header: Mapping[str, Any], arrays: Mapping[str, np.ndarray], *,
              warmups: list[int] | None = None, threads: int = 1, limits: SandboxLimits = RUN_LIMITS,
              per_job: list[dict[str, Any]] | None = None, numba_cpu: str = NUMBA_CPU
              ) -> tuple[list[tuple[dict[str, np.ndarray], dict[str, Any]] | RunFailure], dict]:
    """Run several built kernels of one task, one after another, in one child (one interpreter start for all:
    on a loaded 2-core host starting Python with numpy costs ~0.6 s). Each job's answer is a frame written as soon
    as it is done; when a job crashes the child dies, that job gets its :class:`RunFailure` and a fresh child runs
    the rest. ``header`` holds ``cases``, ``timing`` and ``eager`` shared by the jobs. ``so_paths`` entries of None
    time the reference alone, unless that job's ``per_job`` entry holds a numba candidate (``py``, ``fastmath``,
    ``n_in``, ``n_dims``: compiled in the child with ``NUMBA_CPU_NAME=numba_cpu``, its ``inspect_asm`` text and
    compile seconds returned in the meta, a compile failure as ``compile_error``); ``per_job`` entries also
    override ``cases``/``timing``/``eager`` for one job. Returns
    (per-job result or failure, isolation layers)."""
    warmups = warmups or [3] * len(so_paths)
    results: list[tuple[dict[str, np.ndarray], dict[str, Any]] | RunFailure] = []
    layers: dict = {}
    start = 0
    while start < len(so_paths):
        todo = list(range(start, len(so_paths)))
        payload = dict(arrays)
        jobs = []
        for i in todo:
            if so_paths[i] is not None:
                with open(so_paths[i], "rb") as f:  # type: ignore[arg-type]
                    payload[f"so{i}"] = np.frombuffer(f.read(), dtype=np.uint8)
            jobs.append({**(per_job[i] if per_job else {}), "so": f"so{i}" if so_paths[i] is not None else "",
                         "warmup": int(warmups[i])})
        buf = io.BytesIO()
        np.savez(buf, **payload)
        h = json.dumps({**dict(header), "jobs": jobs}).encode()
        env = {"OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "NUMBA_NUM_THREADS": str(threads), "NUMBA_CPU_NAME": numba_cpu}
        if numba_cpu == NUMBA_CPU:  # the pinned name needs its feature list too, or numba adds the host's
            env["NUMBA_CPU_FEATURES"] = NUMBA_CPU_FEATURES
        lim = SandboxLimits(**{**limits.__dict__, "wall_s": limits.wall_s * len(todo),
                               "cpu_s": int(limits.cpu_s * len(todo)), "cpu_hard_s": int(limits.cpu_s * len(todo)) + 2})
        r = run_command([sys.executable, "-I", "-c", CHILD], limits=lim, stdin=len(h).to_bytes(8, "little") + h
                        + buf.getvalue(), env=env, isolate=True, max_output=1 << 31)
        layers = r.layers
        data, pos = r.stdout, 0
        while pos + 8 <= len(data):
            n = int.from_bytes(data[pos:pos + 8], "little")
            if pos + 8 + n > len(data):
                break
            try:
                z = np.load(io.BytesIO(data[pos + 8:pos + 8 + n]), allow_pickle=False)
                outs = {k: z[k] for k in z.files if k != "meta"}
                results.append((outs, json.loads(z["meta"].tobytes().decode())))
            except Exception as e:  # noqa: BLE001 - the child's bytes are untrusted data: a parse failure is an outcome
                results.append(RunFailure("malformed answer", type(e).__name__))
            pos += 8 + n
        start = len(results)
        if start < len(so_paths):
            results.append(_failure(r, limits))
            start += 1
    return results, layers


def _failure(r: Any, limits: SandboxLimits) -> RunFailure:
    if r.timed_out:
        return RunFailure("timeout", f"wall clock {limits.wall_s:g} s")
    rc = r.returncode
    sig = -rc if rc < 0 else (rc - 128 if rc > 128 else 0)
    if sig in (signal.SIGXCPU, signal.SIGKILL):
        return RunFailure("timeout", "CPU limit")
    err = r.stderr.decode(errors="replace")
    if "MemoryError" in err or "Cannot allocate" in err:
        return RunFailure("memory", f"address space {limits.memory_bytes >> 30} GiB")
    if sig:
        return RunFailure(f"crashed: {signal.Signals(sig).name}")
    return RunFailure("crashed", err.strip().splitlines()[-1][:300] if err.strip() else f"exit {rc}")
