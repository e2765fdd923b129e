"""Signal collection for the tools: assembly (A), valgrind's deterministic simulators (V), timing sweeps (T, the
dispatch fit), thread scaling (P), subnormal inputs (D) and Python-level allocation (M).

valgrind runs a small C driver linked against the candidate's shared object, twice (with and without the kernel
call), and keeps the difference, so the driver's own set-up is not counted. cachegrind simulates the host's L1d
geometry (from /sys) and, as its last level, the host's L2 geometry: the reduced problem sizes used under valgrind
then sit in the same regime relative to that level as the full sizes do to the L3 (docs/methods/kernelpro.md,
deviations). valgrind cannot run AVX-512 code; builds for it are pinned to x86-64-v3."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.core.sandbox import SandboxLimits, run_command
from agentmill.methods.kernelpro import asm, cbackend
from agentmill.methods.kernelpro.tasks import Shape, Task

VALGRIND_LIMITS = SandboxLimits(wall_s=120.0, cpu_s=120, cpu_hard_s=122, memory_bytes=8 << 30,
                                max_file_bytes=1 << 20, max_open_files=256)


def asm_signals(so_path: str) -> tuple[asm.HotLoop | None, list[asm.HotLoop]]:
    """The hot loop and every innermost loop's classification."""
    text = cbackend.disassemble_all(so_path)
    insns = asm.kernel_insns(text)
    return asm.hot_loop_of(insns), [asm.classify(lp.insns, lp) for lp in asm.innermost(asm.loops(insns))]


def _driver_src(task: Task) -> str:
    n_in = task.n_inputs
    dims = len(task.dims)
    proto = ", ".join(["const float*"] * n_in + ["float*"] + ["int64_t"] * dims)
    lines = ["#include <stdint.h>", "#include <stdlib.h>", f"extern void kernel({proto});",
             "int main(int argc, char** argv) {", "    int call = atoi(argv[1]);", "    int64_t k = 2;"]
    for j in range(n_in):
        lines.append(f"    int64_t n{j} = atoll(argv[{k_ix(j)}]); float* i{j} = malloc(sizeof(float) * (n{j} + 1));")
        lines.append(f"    uint32_t s{j} = {12345 + j}u; for (int64_t q = 0; q < n{j}; q++) "
                     f"{{ s{j} = s{j} * 1664525u + 1013904223u; i{j}[q] = (float)((s{j} >> 8) & 0xffff) / 32768.0f - 1.0f; }}")
    lines.append(f"    int64_t no = atoll(argv[{k_ix(n_in)}]); float* o = calloc(no + 1, sizeof(float));")
    dim_args = [f"atoll(argv[{k_ix(n_in + 1 + d)}])" for d in range(dims)]
    args = ", ".join([f"i{j}" for j in range(n_in)] + ["o"] + dim_args)
    lines += [f"    if (call) kernel({args});", "    return o[0] == 12345.0f;", "}"]
    return "\n".join(lines) + "\n"


def k_ix(i: int) -> int:
    return 2 + i


def _driver(task: Task, so_path: str) -> str:
    src = _driver_src(task)
    key = hashlib.sha256((src + so_path).encode()).hexdigest()[:20]
    d = cache_root() / "kernelpro" / "drivers"
    d.mkdir(parents=True, exist_ok=True)
    exe = d / f"{key}"
    if not exe.exists():
        c = d / f"{key}.c"
        c.write_text(src)
        tmp = d / f"{key}.tmp"
        r = subprocess.run(["gcc", "-O1", str(c), so_path, "-o", str(tmp), f"-Wl,-rpath,{Path(so_path).parent}",
                            "-lm"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"valgrind driver failed to build: {r.stderr[:500]}")
        tmp.rename(exe)
    return str(exe)


def _cg_numbers(err: str) -> dict[str, float]:
    def grab(label: str) -> list[float]:
        m = re.search(rf"==\d+== {label}\s*([\d,]+)(?:\s*\(\s*([\d,]+) \w+\s*\+\s*([\d,]+) \w+\))?", err)
        if not m:
            return []
        return [float(x.replace(",", "")) for x in m.groups() if x is not None]

    out: dict[str, float] = {}
    for key, label in (("ir", r"I\s+refs:"), ("d", r"D\s+refs:"), ("d1", r"D1\s+misses:"), ("lld", r"LLd misses:"),
                       ("br", r"Branches:"), ("mp", r"Mispredicts:")):
        v = grab(label)
        if v:
            out[key] = v[0]
            if len(v) == 3:
                out[key + "_a"], out[key + "_b"] = v[1], v[2]
    return out


def valgrind_available() -> bool:
    return shutil.which("valgrind") is not None


def valgrind_signals(task: Task, so_path: str, shape: Shape, caches: dict[str, int],
                     ir_ruler_per_elem: float | None = None) -> dict[str, Any]:
    """cachegrind (cache and branch simulation) of one call at ``shape`` minus the driver alone."""
    if not valgrind_available():
        raise RuntimeError("valgrind is not installed: tools needing the V signal are skipped (apt-get install valgrind)")
    ins = task.make(shape, np.random.default_rng(0), "normal")
    n_out = int(np.prod(task.out_shape(shape)))
    exe = _driver(task, so_path)
    l1, l2 = caches.get("L1", 32768), caches.get("L2", 1 << 20)
    res = []
    for call in (0, 1):
        argv = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", "--branch-sim=yes", f"--D1={l1},8,64",
                f"--LL={l2},8,64", "--cachegrind-out-file=/dev/null", exe, str(call)]
        argv += [str(x.size) for x in ins] + [str(n_out)] + [str(d) for d in shape]
        r = run_command(argv, limits=VALGRIND_LIMITS, env={"HOME": "/tmp"}, max_output=1 << 20)
        if r.returncode not in (0, 1):
            raise RuntimeError(f"valgrind failed (exit {r.returncode}): {r.stderr.decode(errors='replace')[-400:]}")
        res.append(_cg_numbers(r.stderr.decode(errors="replace")))
    base, k = res

    def diff(key: str) -> float:
        return max(0.0, k.get(key, 0.0) - base.get(key, 0.0))

    d_rd, d1_rd = diff("d_a"), diff("d1_a")
    elems = max(n_out, max(x.size for x in ins))
    out = {"d1_read_miss_ratio": d1_rd / d_rd if d_rd else 0.0,
           "ll_misses_over_compulsory": diff("lld") / max(1.0, task.bytes(shape) / 64),
           "mispredict_rate": diff("mp_a") / diff("br_a") if diff("br_a") else 0.0,
           "ir_per_elem": diff("ir") / elems, "valgrind_shape": list(shape)}
    if ir_ruler_per_elem is not None:
        out["ir_ruler_per_elem"] = ir_ruler_per_elem
    return out


def dispatch_share(task: Task, so_path: str, shape: Shape, threads: int = 1) -> float:
    """Fit t(n) = t0 + c·n over sizes n/16, n/4, n (first dimension scaled); return t0 / t(n)."""
    sizes = [tuple([max(1, shape[0] // f)] + list(shape[1:])) for f in (16, 4, 1)]
    ts = [_time_so(so_path, task, s, threads, stat="min") for s in sizes]
    n = np.array([s[0] for s in sizes], dtype=float)
    c, t0 = np.polyfit(n, np.array(ts), 1)
    return float(max(0.0, t0) / ts[-1])


def _time_so(so_path: str, task: Task, shape: Shape, threads: int, dist: str = "normal",
             scale: float = 1.0, stat: str = "median") -> float:
    from agentmill.methods.kernelpro import harness

    ins = [x * np.float32(scale) for x in task.make(shape, np.random.default_rng(0), dist)]
    arrays = {f"i{j}": x for j, x in enumerate(ins)}
    header = {"cases": [], "eager": "None",
              "timing": [{"sets": [[f"i{j}" for j in range(len(ins))]], "dims": list(shape),
                          "out_shape": list(task.out_shape(shape)), "min_batch_s": 2e-3, "max_repeats": 9,
                          "min_repeats": 9, "rse": 0.0, "budget_s": 5.0, "seed": 0}]}
    res, _ = harness.run_batch([so_path], header, arrays, threads=threads)
    r = res[0]
    if isinstance(r, harness.RunFailure):
        raise RuntimeError(f"timing run failed: {r}")
    ts = r[1]["timing"][0]["cand_s"]
    return float(np.min(ts) if stat == "min" else np.median(ts))


def time_so(so_path: str, task: Task, shape: Shape, threads: int = 1, dist: str = "normal",
            scale: float = 1.0, stat: str = "median") -> float:
    """Seconds per call of a built kernel at ``shape`` (inputs from ``dist``, multiplied by ``scale``): the median
    of the repeats, or their minimum (``stat="min"``: a capability measurement, since a loaded host only ever slows
    a call down)."""
    return _time_so(so_path, task, shape, threads, dist, scale, stat)


def thread_speedup(so_path: str, task: Task, shape: Shape) -> float:
    """t(1 thread) / t(2 threads) of an OpenMP build."""
    return _time_so(so_path, task, shape, 1, stat="min") / _time_so(so_path, task, shape, 2, stat="min")


def alloc_peak_ratio(fn: Callable[..., Any], args: tuple, out_bytes: int) -> float:
    """Peak Python-level allocation (tracemalloc) during one call of a numpy formulation / output bytes."""
    fn(*args)
    tracemalloc.start()
    try:
        fn(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / out_bytes


def interleaved_times(jobs: list[tuple[str | None, dict[str, Any]]], arrays: dict[str, np.ndarray], rounds: int,
                      threads: int = 1, reps: int = 3) -> list[list[float]]:
    """Time several kernels alternately (A, B, …, A, B, …) in one child: ``rounds`` rounds of ``reps`` repeats
    each. ``jobs``: (shared object or None for the eager expression, its ``per_job`` header). Returns, per job, the
    median seconds per call of each round (drift on a shared host hits both sides of a ratio alike)."""
    from agentmill.methods.kernelpro import harness

    paths, per_job = [], []
    for _ in range(rounds):
        for so, hdr in jobs:
            t = dict(hdr["timing"][0])
            t.update({"max_repeats": reps, "min_repeats": reps, "rse": 0.0})
            paths.append(so)
            per_job.append({**hdr, "timing": [t]})
    res, _ = harness.run_batch(paths, {"cases": []}, arrays, threads=threads, per_job=per_job,
                               warmups=[1] * len(paths))
    out: list[list[float]] = [[] for _ in jobs]
    for i, r in enumerate(res):
        if isinstance(r, harness.RunFailure):
            raise RuntimeError(f"interleaved timing failed: {r}")
        tm = r[1]["timing"][0]
        out[i % len(jobs)].append(float(np.median(tm["cand_s"] or tm["ref_s"])))
    return out


def timing_header(task: Task, shape: Shape, keys: list[str], eager: str = "None") -> dict[str, Any]:
    """A ``per_job`` header timing ``task`` at ``shape`` on the arrays named ``keys``."""
    return {"eager": eager, "timing": [{"sets": [keys], "dims": list(shape), "out_shape": list(task.out_shape(shape)),
                                        "min_batch_s": 1e-3, "max_repeats": 3, "min_repeats": 3, "rse": 0.0,
                                        "budget_s": 5.0, "seed": 0, "with_ref": eager != "None"}]}
