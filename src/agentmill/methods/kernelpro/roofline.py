"""The roofline measured on the machine it runs on, and Stage-1 bottleneck classification.

Hardware counters are unavailable on this project's hosts (``perf stat -e cycles`` prints ``<not supported>``), so
every ceiling is a timed microbenchmark, never a constant: peak FLOP/s from independent FMA chains (one variant per
vector ISA the host has), bandwidth per cache level from STREAM-style copy/scale/add/triad kernels over log-spaced
working sets, and the dispatch floor from an empty kernel call. Each ceiling is measured in several separate
processes; the ceiling is the max over them and its spread (max - min) / median is recorded ("unstable" above 5 %).
Results are cached per machine fingerprint under ``core.paths.cache_root()/kernelpro/ceilings``."""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import math
import os
import platform
import time

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.machine import host_cpu
from agentmill.core.paths import cache_root
from agentmill.core.records import write_json_atomic
from agentmill.methods.kernelpro import cbackend, harness
from agentmill.methods.kernelpro.config import MARCH
from agentmill.methods.kernelpro.tasks import Shape, Task

SCHEMA = 2
UNSTABLE_SPREAD = 0.05
"""[R] A ceiling whose spread over processes exceeds this marks the calibration unstable (VM noise)."""

FMA_SRC = {"avx2": r"""
#include <stdint.h>
#include <immintrin.h>
static float one(const float* x, int64_t n) {
    __m256 a0 = _mm256_set1_ps(x[0]), a1 = _mm256_set1_ps(x[1]), a2 = _mm256_set1_ps(x[2]),
           a3 = _mm256_set1_ps(x[3]), a4 = _mm256_set1_ps(x[4]), a5 = _mm256_set1_ps(x[5]),
           a6 = _mm256_set1_ps(x[6]), a7 = _mm256_set1_ps(x[7]), a8 = _mm256_set1_ps(x[8]),
           a9 = _mm256_set1_ps(x[9]), a10 = _mm256_set1_ps(x[10]), a11 = _mm256_set1_ps(x[11]);  /* distinct
           starts: identical chains would be merged into one by the compiler */
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < n; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c); a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c); a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c); a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c); a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
               _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)),
                             _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11))));
    float t[8]; _mm256_storeu_ps(t, s);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
void kernel(const float* x, float* out, int64_t n) {
    float r = 0.0f;
    #pragma omp parallel reduction(+:r)
    r += one(x, n);
    out[0] = r;
}
""", "avx512": r"""
#include <stdint.h>
#include <immintrin.h>
static float one(const float* x, int64_t n) {
    __m512 a0 = _mm512_set1_ps(x[0]), a1 = _mm512_set1_ps(x[1]), a2 = _mm512_set1_ps(x[2]),
           a3 = _mm512_set1_ps(x[3]), a4 = _mm512_set1_ps(x[4]), a5 = _mm512_set1_ps(x[5]),
           a6 = _mm512_set1_ps(x[6]), a7 = _mm512_set1_ps(x[7]), a8 = _mm512_set1_ps(x[8]),
           a9 = _mm512_set1_ps(x[9]), a10 = _mm512_set1_ps(x[10]), a11 = _mm512_set1_ps(x[11]);  /* distinct
           starts: identical chains would be merged into one by the compiler */
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < n; i++) {
        a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c); a2 = _mm512_fmadd_ps(a2, m, c);
        a3 = _mm512_fmadd_ps(a3, m, c); a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c); a7 = _mm512_fmadd_ps(a7, m, c); a8 = _mm512_fmadd_ps(a8, m, c);
        a9 = _mm512_fmadd_ps(a9, m, c); a10 = _mm512_fmadd_ps(a10, m, c); a11 = _mm512_fmadd_ps(a11, m, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
               _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                             _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
    return _mm512_reduce_add_ps(s);
}
void kernel(const float* x, float* out, int64_t n) {
    float r = 0.0f;
    #pragma omp parallel reduction(+:r)
    r += one(x, n);
    out[0] = r;
}
"""}
FMA_LANES = {"avx2": 8, "avx512": 16}
FMA_ACC = 12  # [R] 12 independent accumulators: enough chains to cover FMA latency x 2 pipes
STREAM_BODY = {"copy": "a[i] = b[i] + z", "scale": "a[i] = (3.0f + z) * b[i]", "add": "a[i] = b[i] + c[i] + z",
               "triad": "a[i] = b[i] + (3.0f + z) * c[i]"}
"""STREAM's four kernels; ``z`` is read from a volatile zero each pass so the passes cannot be merged."""


def stream_src(kind: str) -> str:
    """A STREAM kernel repeating its pass ``reps`` times inside one call (a call on an L1-sized array would
    otherwise measure the dispatch floor, not the bandwidth)."""
    ins = "const float* restrict b, const float* restrict c" if kind in ("add", "triad") else "const float* restrict b"
    return ("#include <stdint.h>\nvoid kernel(" + ins + ", float* restrict a, int64_t n, int64_t reps) {\n"
            "    volatile float zero = 0.0f; volatile float sink = 0.0f;\n"
            "    for (int64_t r = 0; r < reps; r++) {\n        const float z = zero;\n"
            "        #pragma omp parallel for schedule(static)\n"
            f"        for (int64_t i = 0; i < n; i++) {STREAM_BODY[kind]};\n"
            "        sink = a[(r * 7919) % n];\n    }\n}\n")


STREAM_BYTES = {"copy": 8, "scale": 8, "add": 12, "triad": 12}
"""Bytes per element by STREAM's convention (reads + writes, no write-allocate)."""
EMPTY_SRC = "#include <stdint.h>\nvoid kernel(const float* x, float* out, int64_t n) { (void)x; (void)out; (void)n; }\n"


def cache_geometry(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """{"L1": bytes, "L2": bytes, "L3": bytes} of data/unified caches from /sys (never from a document)."""
    out: dict[str, int] = {}
    for d in sorted(glob.glob(os.path.join(root, "index*"))):
        try:
            typ = Path(d, "type").read_text().strip()
            lvl = int(Path(d, "level").read_text())
            size = Path(d, "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if typ == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
        out[f"L{lvl}"] = int(size.rstrip("KMG")) * mult
    return out


def openblas_core() -> str:
    """The core type numpy's OpenBLAS dispatches to (``scipy_openblas_get_corename64_``), or ``unknown``."""
    import numpy

    base = os.path.dirname(numpy.__file__)
    for lib in glob.glob(os.path.join(base, "..", "numpy.libs", "*openblas*")):
        try:
            d = ctypes.CDLL(lib)
        except OSError:
            continue
        for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            f = getattr(d, name, None)
            if f is not None:
                f.restype = ctypes.c_char_p
                return f().decode()
    return "unknown"


def openblas_isa(core: str) -> str:
    return "avx512" if core.lower() in {"skylakex", "cooperlake", "sapphirerapids"} else "avx2"


def fingerprint() -> dict[str, Any]:
    cpu = host_cpu()
    return {"cpu": cpu["model"], "flags": cpu["flags"], "cores": os.cpu_count(), "caches": cache_geometry(),
            "gcc": cbackend.gcc_version(), "machine": platform.machine(), "schema": SCHEMA}


def fingerprint_key(fp: dict[str, Any] | None = None) -> str:
    return hashlib.sha256(json.dumps(fp or fingerprint(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Ceilings:
    """Measured ceilings of one machine. GFLOP/s and GB/s; each value is the max over processes, with its
    spread. ``bandwidth[(level, threads)]``; ``peak[(isa, threads)]``."""

    peak: dict[str, float]
    peak_spread: dict[str, float]
    bandwidth: dict[str, float]
    bandwidth_spread: dict[str, float]
    floor_s: float
    floor_spread: float
    sgemm: dict[str, float]
    sgemm_spread: dict[str, float]
    openblas_core: str
    caches: dict[str, int]
    fingerprint: dict[str, Any]
    sweep: list[dict[str, Any]] = field(default_factory=list)
    per_process: list[dict[str, Any]] = field(default_factory=list)
    """Each process's own peak, sgemm and floor (for per-process ratios)."""
    processes: int = 3
    isa: str = "avx2"

    @property
    def stable(self) -> bool:
        spreads = [*self.peak_spread.values(), *self.bandwidth_spread.values()]
        return all(s <= UNSTABLE_SPREAD for s in spreads)

    def max_spread(self) -> float:
        return max([*self.peak_spread.values(), *self.bandwidth_spread.values(), 0.0])

    def p_peak(self, threads: int = 1) -> float:
        return self.peak[f"{self.isa}/{threads}"]

    def bw(self, level: str, threads: int = 1) -> float:
        """Bandwidth of ``level``; a level the sweep did not reach falls back to the nearest measured one."""
        order = ["L1", "L2", "L3", "DRAM"]
        i = order.index(level)
        for j in sorted(range(len(order)), key=lambda j: (abs(j - i), -j)):
            if f"{order[j]}/{threads}" in self.bandwidth:
                return self.bandwidth[f"{order[j]}/{threads}"]
        raise KeyError(f"no bandwidth measured for {threads} thread(s)")

    def level_of(self, working_set: float) -> str:
        """The cache level that holds ``working_set`` bytes (DRAM beyond the last level)."""
        for lvl in ("L1", "L2", "L3"):
            if lvl in self.caches and working_set <= self.caches[lvl]:
                return lvl
        return "DRAM"

    def generous_peak(self) -> float:
        return max(self.peak.values()) / (1 + self.max_spread())

    def generous_bw(self) -> float:
        return max(self.bandwidth.values()) / (1 + self.max_spread())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ceilings:
        return cls(**d)


def time_kernels(srcs: list[tuple[str, tuple[str, ...]]], task_like: dict[str, Any], arrays: dict[str, np.ndarray],
                  threads: int, eager: str = "None", repeats: int = 7, with_ref: bool = False,
                  stat: str = "median") -> list[float]:
    """Seconds per call of each kernel, the median (or ``stat="min"``) of its repeats (``None`` source: the eager
    expression alone)."""
    paths: list[str | None] = []
    for src, flags in srcs:
        if src is None:
            paths.append(None)
            continue
        b = cbackend.compile_c(src, flags)
        if not b.ok:
            raise RuntimeError(f"calibration kernel failed to compile: {b.stderr[:500]}")
        paths.append(b.so_path)
    header = {"cases": [], "eager": eager,
              "timing": [{**task_like, "min_batch_s": 2e-3, "max_repeats": repeats, "min_repeats": repeats,
                          "rse": 0.0, "budget_s": 5.0, "seed": 0, "with_ref": with_ref}]}
    res, _ = harness.run_batch(paths, header, arrays, warmups=[2] * len(paths), threads=threads)
    out: list[float] = []
    for r in res:
        if isinstance(r, harness.RunFailure):
            raise RuntimeError(f"calibration kernel failed: {r}")
        tm = r[1]["timing"][0]
        x = tm["cand_s"] or tm["ref_s"]
        out.append(float(np.min(x) if stat == "min" else np.median(x)))
    return out


def stream_sizes(caches: dict[str, int], which: str) -> list[int]:
    """Working sets (bytes) of the bandwidth sweep: 10 log-spaced from 16 KiB to 128 MiB (full), one point well
    inside each level plus DRAM at ≥ 8 × L3 (quick), four points (smoke) or two (tiny: tests)."""
    l1, l2, l3 = caches.get("L1", 32 << 10), caches.get("L2", 1 << 20), caches.get("L3", 32 << 20)
    if which == "full":
        return [int(x) for x in np.geomspace(16 << 10, 128 << 20, 10)]
    if which == "smoke":
        return [l1 // 2, l2 // 2, min(l3 // 4, 8 << 20), 2 * l3]
    if which == "tiny":
        return [l1 // 2, l2 // 2]
    return [l1 // 2, l2 // 2, min(l3 // 4, 8 << 20), max(8 * l3, 256 << 20)]


def measure_once(threads: int, which: str, caches: dict[str, int], isas: list[str]) -> dict[str, Any]:
    """One process's worth of measurements, all in one child: FMA peak per ISA, the bandwidth sweep, the dispatch
    floor (an empty kernel) and OpenBLAS sgemm through numpy."""
    n_fma = {"full": 2_000_000, "quick": 500_000}.get(which, 200_000)
    omp = ("-fopenmp",) if threads > 1 else ()
    arrays: dict[str, np.ndarray] = {"x": np.linspace(0.1, 1.6, 16).astype(np.float32)}
    jobs: list[tuple[str | None, tuple[str, ...], dict[str, Any], dict[str, Any]]] = []

    def timing(sets: list[list[str]], dims: list[int], out_shape: list[int], reps: int = 7) -> dict[str, Any]:
        return {"timing": [{"sets": sets, "dims": dims, "out_shape": out_shape, "min_batch_s": 2e-3,
                            "max_repeats": reps, "min_repeats": reps, "rse": 0.0, "budget_s": 5.0, "seed": 0}],
                "eager": "None"}

    for isa in isas:
        fl = ("-O2", f"-march={MARCH}" if isa == "avx2" else "-march=native", "-fopenmp")
        jobs.append((FMA_SRC[isa], fl, timing([["x"]], [n_fma], [1]), {"what": "fma", "isa": isa}))
    kinds = {"full": ("copy", "add", "triad"), "quick": ("copy", "triad")}.get(which, ("triad",))
    for ws in stream_sizes(caches, which):
        n = max(1024, ws // 12)
        if f"s{n}" not in arrays:
            arrays[f"s{n}"] = np.full(n, 1.5, np.float32)
            arrays[f"t{n}"] = np.full(n, 0.5, np.float32)
        for k in kinds:
            m = max(1024, ws // STREAM_BYTES[k])
            m = min(m, n)
            reps = max(1, (16 << 20) // (m * STREAM_BYTES[k]))
            sets = [[f"s{n}", f"t{n}"]] if k in ("add", "triad") else [[f"s{n}"]]
            jobs.append((stream_src(k), ("-O3", f"-march={MARCH}") + omp, timing(sets, [m, reps], [m], 5),
                         {"what": "stream", "kind": k, "ws": m * STREAM_BYTES[k], "bytes": STREAM_BYTES[k] * m * reps}))
    jobs.append((EMPTY_SRC, ("-O2", f"-march={MARCH}"), timing([["x"]], [1], [1]), {"what": "floor"}))
    ng = {"full": 1024, "quick": 512}.get(which, 256)
    arrays["g"] = np.random.default_rng(0).standard_normal((ng, ng)).astype(np.float32)
    sg = timing([["g", "g"]], [ng], [ng, ng], 5)
    sg["eager"] = "a[0] @ a[1]"
    jobs.append((None, (), sg, {"what": "sgemm"}))
    paths: list[str | None] = []
    for src, flags, _, _ in jobs:
        if src is None:
            paths.append(None)
            continue
        b = cbackend.compile_c(src, flags)
        if not b.ok:
            raise RuntimeError(f"calibration kernel failed to compile: {b.stderr[:500]}")
        paths.append(b.so_path)
    res, _ = harness.run_batch(paths, {"cases": []}, arrays, warmups=[2] * len(paths), threads=threads,
                               per_job=[j[2] for j in jobs])
    peak: dict[str, float] = {}
    sweep, floor, sgemm = [], math.nan, {}
    for (src, _, _, what), r in zip(jobs, res):
        if isinstance(r, harness.RunFailure):
            raise RuntimeError(f"calibration kernel failed: {r}")
        tm = r[1]["timing"][0]
        t = float(np.median(tm["cand_s"] or tm["ref_s"]))
        if what["what"] == "fma":
            isa = what["isa"]
            peak[f"{isa}/{threads}"] = FMA_ACC * FMA_LANES[isa] * 2 * n_fma * threads / t / 1e9
        elif what["what"] == "stream":
            sweep.append({"kind": what["kind"], "ws": what["ws"], "threads": threads, "gbs": what["bytes"] / t / 1e9})
        elif what["what"] == "floor":
            floor = t
        else:
            sgemm = {f"{threads}": 2 * ng ** 3 / t / 1e9}
    return {"peak": peak, "sweep": sweep, "floor": floor, "sgemm": sgemm}


def plateaus(sweep: list[dict[str, Any]], caches: dict[str, int], threads: int) -> dict[str, float]:
    """Best bandwidth per level: the max over sweep points whose working set sits inside that level."""
    out: dict[str, float] = {}
    bounds = [("L1", 0, caches.get("L1", 32 << 10)), ("L2", caches.get("L1", 32 << 10), caches.get("L2", 1 << 20)),
              ("L3", caches.get("L2", 1 << 20), caches.get("L3", 32 << 20)),
              ("DRAM", 3 * caches.get("L3", 32 << 20) // 2, 1 << 62)]
    for lvl, lo, hi in bounds:
        pts = [p["gbs"] for p in sweep if p["threads"] == threads and lo < p["ws"] <= hi]
        if pts:
            out[f"{lvl}/{threads}"] = max(pts)
    return out


def calibrate(*, threads: tuple[int, ...] = (1,), processes: int = 3, which: str = "quick",
              recalibrate: bool = False, progress=lambda desc, done, total: None) -> Ceilings:
    """Measure (or load the cached) ceilings of this machine. ``which`` = quick (one sweep point per level, two
    STREAM kernels) or full (13 sizes × 4 kernels)."""
    fp = fingerprint()
    name = f"{fingerprint_key(fp)}-{which}-{'-'.join(map(str, threads))}-p{processes}-s{SCHEMA}.json"
    path = cache_root() / "kernelpro" / "ceilings" / name
    if path.exists() and not recalibrate:
        d = json.loads(path.read_text())
        if d.get("fingerprint") == fp:
            return Ceilings.from_json(d)
    caches = cache_geometry()
    isas = ["avx2"] + (["avx512"] if "avx512f" in fp["flags"] else [])
    runs: list[dict[str, Any]] = []
    total = processes * len(threads)
    for p in range(processes):
        for th in threads:
            t0 = time.perf_counter()
            runs.append(measure_once(th, which, caches, isas))
            runs[-1]["seconds"] = time.perf_counter() - t0
            progress("calibration processes", len(runs), total)
    core = openblas_core()

    def agg(dicts: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
        keys = sorted({k for d in dicts for k in d})
        best, spread = {}, {}
        for k in keys:
            v = [d[k] for d in dicts if k in d]
            best[k] = max(v)
            spread[k] = (max(v) - min(v)) / float(np.median(v)) if len(v) > 1 else math.nan
        return best, spread

    peak, peak_sp = agg([r["peak"] for r in runs])
    bw, bw_sp = agg([plateaus(r["sweep"], caches, th) for r in runs for th in threads])
    sg, sg_sp = agg([r["sgemm"] for r in runs])
    floors = [r["floor"] for r in runs]
    c = Ceilings(peak, peak_sp, bw, bw_sp, float(min(floors)), (max(floors) - min(floors)) / float(np.median(floors)),
                 sg, sg_sp, core, caches, fp, [p for r in runs for p in r["sweep"]],
                 [{k: r[k] for k in ("peak", "sgemm", "floor", "seconds")} for r in runs], processes,
                 openblas_isa(core))
    write_json_atomic(path, c.to_json())
    return c


# ------------------------------------------------------------------------------------------- Stage 1
@dataclass
class RooflineReport:
    """Stage 1: the class by two methods, the confidence, and the headroom H = t / t_min."""

    task: str
    shape: list[int]
    ai: float
    ridge: float
    level: str
    analytic: str
    measured: str
    cls: str
    confidence: str
    t: float
    t_min: float
    headroom: float
    f_compute: float
    f_memory: float
    achieved_gflops: float
    achieved_gbs: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analytic_class(ai: float, ridge: float, t_min: float, t_floor: float) -> str:
    """[S rule; R margins] memory below ridge/1.5, compute above 1.5·ridge, mixed between; latency when the
    roofline minimum is under 5 dispatch floors."""
    if t_min < 5 * t_floor:
        return "latency"
    if ai < ridge / 1.5:
        return "memory"
    if ai > 1.5 * ridge:
        return "compute"
    return "mixed"


def measured_class(f_compute: float, f_memory: float, t: float, t_floor: float) -> str:
    """[R] latency when the call is under 10 dispatch floors; else the larger roof fraction names the class,
    mixed when they are within 20 % of each other."""
    if t < 10 * t_floor:
        return "latency"
    hi, lo = max(f_compute, f_memory), min(f_compute, f_memory)
    if hi > 0 and lo >= 0.8 * hi:
        return "mixed"
    return "compute" if f_compute > f_memory else "memory"


def classify_time(task: Task, shape: Shape, t: float, c: Ceilings, threads: int = 1) -> RooflineReport:
    """Stage-1 report for ``task`` at ``shape`` whose reference takes ``t`` seconds per call."""
    F, Q = task.flops(shape), task.bytes(shape)
    lvl = c.level_of(Q)
    P, B = c.p_peak(threads) * 1e9, c.bw(lvl, threads) * 1e9
    tmin = max(F / P, Q / B, c.floor_s)
    ridge = P / B
    ai = F / Q if Q else 0.0
    a = analytic_class(ai, ridge, max(F / P, Q / B), c.floor_s)
    fc, fm = (F / t) / P, (Q / t) / B
    m = measured_class(fc, fm, t, c.floor_s)
    agree = a == m
    return RooflineReport(task.name, list(shape), ai, ridge, lvl, a, m, a, "high" if agree else "low", t, tmin,
                          t / tmin, fc, fm, F / t / 1e9, Q / t / 1e9)


def time_references(items: list[tuple[Task, Shape]], threads: int = 1, seed: int = 0,
                    stat: str = "median") -> list[float]:
    """Seconds per call of each task's numpy-eager reference at its shape, all in one run child."""
    from agentmill.core.seeding import rng_for

    arrays: dict[str, np.ndarray] = {}
    per_job = []
    for q, (task, shape) in enumerate(items):
        ins = task.make(shape, rng_for("kernelpro-classify", task.name, seed), "normal")
        for j, x in enumerate(ins):
            arrays[f"r{q}_{j}"] = x
        per_job.append({"eager": harness.EAGER[task.name],
                        "timing": [{"sets": [[f"r{q}_{j}" for j in range(len(ins))]], "dims": list(shape),
                                    "out_shape": list(task.out_shape(shape)), "min_batch_s": 2e-3, "max_repeats": 7,
                                    "min_repeats": 7, "rse": 0.0, "budget_s": 5.0, "seed": 0, "with_ref": True}]})
    res, _ = harness.run_batch([None] * len(items), {"cases": []}, arrays, threads=threads, per_job=per_job)
    out = []
    for r in res:
        if isinstance(r, harness.RunFailure):
            raise RuntimeError(f"reference timing failed: {r}")
        x = r[1]["timing"][0]["ref_s"]
        out.append(float(np.min(x) if stat == "min" else np.median(x)))
    return out


def time_reference(task: Task, shape: Shape, threads: int = 1, seed: int = 0) -> float:
    """Median seconds per call of the task's numpy-eager reference at ``shape`` (in a run child)."""
    return time_references([(task, shape)], threads, seed)[0]


def ruler_classes(c: Ceilings, threads: int = 1, dram_bytes: int | None = None) -> dict[str, dict[str, Any]]:
    """[R] The rulers with known classes, classified by the measured method: triad at DRAM size (memory), the
    FMA microbenchmark (compute), a 64-element vadd call (latency), an empty call (latency: the floor)."""
    out: dict[str, dict[str, Any]] = {}
    x = np.linspace(0.1, 1.6, 16).astype(np.float32)
    n_fma = 500_000
    t_fma = time_kernels([(FMA_SRC["avx2"], ("-O2", f"-march={MARCH}", "-fopenmp"))],
                          {"sets": [["x"]], "dims": [n_fma], "out_shape": [1]}, {"x": x}, threads)[0]
    F = FMA_ACC * 8 * 2 * n_fma * threads
    out["fma"] = {"truth": "compute", "t": t_fma, "f_compute": F / t_fma / 1e9 / c.p_peak(threads), "f_memory": 0.0}
    n = (dram_bytes or max(8 * c.caches.get("L3", 32 << 20), 256 << 20)) // 12
    arrays = {"b": np.full(n, 1.0, np.float32), "c": np.full(n, 2.0, np.float32)}
    t_tr = time_kernels([(stream_src("triad"), ("-O3", f"-march={MARCH}", "-fopenmp"))],
                         {"sets": [["b", "c"]], "dims": [n, 1], "out_shape": [n]}, arrays, threads, repeats=5)[0]
    out["triad_xl"] = {"truth": "memory", "t": t_tr, "f_compute": 2 * n / t_tr / 1e9 / c.p_peak(threads),
                       "f_memory": 12 * n / t_tr / 1e9 / c.bw("DRAM", threads)}
    v = {"a": np.ones(64, np.float32), "b": np.ones(64, np.float32)}
    from agentmill.methods.kernelpro.library import render

    src, fl = render("vadd", {"opt": "O3", "restrict": 1, "unroll": 1})
    t_v = time_kernels([(src, fl)], {"sets": [["a", "b"]], "dims": [64], "out_shape": [64]}, v, threads)[0]
    out["vadd64"] = {"truth": "latency", "t": t_v, "f_compute": 64 / t_v / 1e9 / c.p_peak(threads),
                     "f_memory": 768 / t_v / 1e9 / c.bw("L1", threads)}
    t_e = time_kernels([(EMPTY_SRC, ("-O2", f"-march={MARCH}"))], {"sets": [["x"]], "dims": [1], "out_shape": [1]},
                        {"x": x}, threads)[0]
    out["empty"] = {"truth": "latency", "t": t_e, "f_compute": 0.0, "f_memory": 0.0}
    for r in out.values():
        r["measured"] = measured_class(r["f_compute"], r["f_memory"], r["t"], c.floor_s)
    return out


