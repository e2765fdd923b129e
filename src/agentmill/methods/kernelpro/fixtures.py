"""The tool fixtures: for every tool a positive kernel (the rule must fire) and a negative one (it must stay
silent), small enough to read. Signals are collected the way ``profile`` collects them for candidates. Fixtures of
timing-triggered tools sit at least 2× away from their thresholds so a loaded host does not flip them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.kernelpro import cbackend, signals
from agentmill.methods.kernelpro.config import MARCH
from agentmill.methods.kernelpro.feedback import Profile
from agentmill.methods.kernelpro.tasks import get_task

V3 = f"-march={MARCH}"
H = "#include <stdint.h>\n"


@dataclass
class StubReport:
    """The Stage-1 numbers a fixture's tool reads (class and headroom)."""

    cls: str
    headroom: float = float("nan")


@dataclass(frozen=True)
class Fixture:
    tool: str
    positive: bool
    task: str
    """Task whose C signature the kernel has (drives the valgrind driver and timing shapes)."""
    source: str
    flags: tuple[str, ...]
    shape: tuple[int, ...]
    cls: str
    collect: tuple[str, ...] = ("A",)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _acc_block(k: int) -> str:
    return (H + f"void kernel(const float* restrict x, float* restrict out, int64_t n) {{\n"
            f"    float acc[{k}] = {{0}};\n    for (int64_t i = 0; i + {k} <= n; i += {k})\n"
            f"        for (int q = 0; q < {k}; q++) acc[q] += x[i + q] * 1.0001f;\n"
            f"    float s = 0.0f;\n    for (int q = 0; q < {k}; q++) s += acc[q];\n    out[0] = s;\n}}\n")


SUM_INORDER = H + ("void kernel(const float* restrict x, float* restrict out, int64_t n) {\n    float s = 0.0f;\n"
                   "    for (int64_t i = 0; i < n; i++) s += x[i];\n    out[0] = s;\n}\n")
SUM_OMP_REDUCTION = H + ("void kernel(const float* restrict x, float* restrict out, int64_t n) {\n    float s = 0.0f;\n"
                         "    #pragma omp parallel for reduction(+:s) schedule(static)\n"
                         "    for (int64_t i = 0; i < n; i++) s += x[i];\n    out[0] = s;\n}\n")
SUM_OMP_ATOMIC = H + ("void kernel(const float* restrict x, float* restrict out, int64_t n) {\n    float s = 0.0f;\n"
                      "    #pragma omp parallel for schedule(static)\n    for (int64_t i = 0; i < n; i++) {\n"
                      "        #pragma omp atomic\n        s += x[i];\n    }\n    out[0] = s;\n}\n")
VADD = H + ("void kernel(const float* restrict a, const float* restrict b, float* restrict out, int64_t n) {\n"
            "    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];\n}\n")
VADD_DOUBLE_CONST = H + ("void kernel(const float* restrict a, const float* restrict b, float* restrict out, "
                         "int64_t n) {\n    for (int64_t i = 0; i < n; i++) out[i] = a[i] * 0.5 + b[i];\n}\n")
VADD_FLOAT_CONST = VADD_DOUBLE_CONST.replace("0.5 +", "0.5f +")
VADD_INDEX_MATH = H + ("void kernel(const float* restrict a, const float* restrict b, float* restrict out, "
                       "int64_t n) {\n    for (int64_t i = 0; i < n; i++) {\n        int64_t j = (i / 7) * 7 + i % 7;\n"
                       "        if (j >= 0 && j < n) out[j] = a[j] + b[j];\n    }\n}\n")
COL_SUM = H + ("void kernel(const float* restrict a, float* restrict out, int64_t rows, int64_t cols) {\n"
               "    for (int64_t j = 0; j < cols; j++) {\n        float s = 0.0f;\n"
               "        for (int64_t i = 0; i < rows; i++) s += a[i * cols + j];\n        out[j] = s;\n    }\n}\n")
ROW_SUM = H + ("void kernel(const float* restrict a, float* restrict out, int64_t rows, int64_t cols) {\n"
               "    for (int64_t j = 0; j < cols; j++) out[j] = 0.0f;\n"
               "    for (int64_t i = 0; i < rows; i++)\n        for (int64_t j = 0; j < cols; j++) "
               "out[j] += a[i * cols + j];\n}\n")
GEMM_NAIVE = H + ("void kernel(const float* restrict a, const float* restrict b, float* restrict c, int64_t n) {\n"
                  "    for (int64_t i = 0; i < n; i++)\n        for (int64_t j = 0; j < n; j++) {\n"
                  "            float s = 0.0f;\n            for (int64_t k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];\n"
                  "            c[i * n + j] = s;\n        }\n}\n")
GEMM_TILED = H + ("#define T 128\nvoid kernel(const float* restrict a, const float* restrict b, float* restrict c, "
                  "int64_t n) {\n    for (int64_t q = 0; q < n * n; q++) c[q] = 0.0f;\n"
                  "    for (int64_t ii = 0; ii < n; ii += T)\n    for (int64_t kk = 0; kk < n; kk += T)\n"
                  "    for (int64_t jj = 0; jj < n; jj += T)\n"
                  "        for (int64_t i = ii; i < ii + T && i < n; i++)\n"
                  "            for (int64_t k = kk; k < kk + T && k < n; k++) {\n"
                  "                float av = a[i * n + k];\n"
                  "                for (int64_t j = jj; j < jj + T && j < n; j++) c[i * n + j] += av * b[k * n + j];\n"
                  "            }\n}\n")
TRANSPOSE_NAIVE = H + ("void kernel(const float* restrict a, float* restrict out, int64_t rows, int64_t cols) {\n"
                       "    for (int64_t i = 0; i < rows; i++)\n        for (int64_t j = 0; j < cols; j++) "
                       "out[j * rows + i] = a[i * cols + j];\n}\n")
TRANSPOSE_BLOCKED = H + ("#define B 32\nvoid kernel(const float* restrict a, float* restrict out, int64_t rows, "
                         "int64_t cols) {\n    for (int64_t ii = 0; ii < rows; ii += B)\n"
                         "    for (int64_t jj = 0; jj < cols; jj += B)\n"
                         "        for (int64_t i = ii; i < ii + B && i < rows; i++)\n"
                         "            for (int64_t j = jj; j < jj + B && j < cols; j++) out[j * rows + i] = a[i * cols + j];\n}\n")
BRANCHY = H + ("void kernel(const float* restrict x, float* restrict out, int64_t n) {\n    float s = 0.0f;\n"
               "    for (int64_t i = 0; i < n; i++) {\n        if (x[i] > 0.0f) s += x[i];\n        else s -= 1.0f;\n"
               "    }\n    out[0] = s;\n}\n")
BRANCHLESS = H + "#include <math.h>\n" + ("void kernel(const float* restrict x, float* restrict out, int64_t n) {\n"
                                          "    float s = 0.0f;\n    for (int64_t i = 0; i < n; i++) s += fmaxf(x[i], 0.0f);\n"
                                          "    out[0] = s;\n}\n")
MUL_CHAIN = H + ("void kernel(const float* restrict a, const float* restrict b, float* restrict out, int64_t n) {\n"
                 "    (void)b;\n    for (int64_t i = 0; i < n; i++) {\n        float v = a[i];\n"
                 "        for (int k = 0; k < 16; k++) v = v * 0.99f;\n        out[i] = v;\n    }\n}\n")


def fixtures() -> list[Fixture]:
    O3, O2 = ("-O3", V3), ("-O2", V3)
    n_sum = 1 << 20
    return [
        Fixture("ScalarFallback", True, "sum", SUM_INORDER, O3, (n_sum,), "memory"),
        Fixture("ScalarFallback", False, "sum", SUM_INORDER, O3 + ("-ffast-math",), (n_sum,), "memory"),
        Fixture("NarrowVectors", True, "vadd", VADD, O3 + ("-mprefer-vector-width=128",), (1 << 16,), "memory"),
        Fixture("NarrowVectors", False, "vadd", VADD, O3, (1 << 16,), "memory"),
        Fixture("StackSpill", True, "sum", _acc_block(128), O3, (1 << 16,), "compute"),
        Fixture("StackSpill", False, "sum", _acc_block(64), O3, (1 << 16,), "compute"),
        Fixture("StridedAccess", True, "transpose", COL_SUM, O2, (512, 512), "memory", ("V",)),
        Fixture("StridedAccess", False, "transpose", ROW_SUM, O2, (512, 512), "memory", ("V",)),
        Fixture("CacheBlocking", True, "transpose", TRANSPOSE_NAIVE, O2, (2000, 2000), "memory", ("V",),
                extra={"ll_bytes": 64 << 10}),
        Fixture("CacheBlocking", False, "transpose", TRANSPOSE_BLOCKED, O2, (2000, 2000), "memory", ("V",),
                extra={"ll_bytes": 64 << 10}),
        Fixture("ThreadUnderuse", True, "sum", SUM_INORDER, O2, (n_sum,), "memory", ("T",)),
        Fixture("ThreadUnderuse", False, "sum", SUM_OMP_REDUCTION, O2 + ("-fopenmp",), (n_sum,), "memory", ("T",)),
        Fixture("DispatchOverhead", True, "vadd", VADD, O3, (64,), "latency", ("S",)),
        Fixture("DispatchOverhead", False, "vadd", VADD, O3, (655360,), "memory", ("S",)),
        Fixture("AtMemoryRoof", True, "vadd", VADD, O3, (1 << 20,), "memory", ("R",)),
        Fixture("AtMemoryRoof", False, "sum", SUM_INORDER, O3, (1 << 21,), "memory", ("R",)),
        Fixture("Temporaries", True, "softmax_rows", "numpy:softmax_eager", (), (64, 2048), "memory", ("M",)),
        Fixture("Temporaries", False, "vadd", "numpy:add_out", (), (1 << 18,), "memory", ("M",)),
        Fixture("BranchMispredict", True, "sum", BRANCHY, ("-O1", V3), (1 << 16,), "latency", ("V", "A")),
        Fixture("BranchMispredict", False, "sum", BRANCHLESS, O2, (1 << 16,), "latency", ("V", "A")),
        Fixture("LibraryDelegation", True, "gemm", GEMM_NAIVE, O2, (256,), "compute", ("C",)),
        Fixture("LibraryDelegation", False, "sum", "ruler:fma", (), (500_000,), "compute", ("C",)),
        Fixture("PrecisionMismatch", True, "vadd", VADD_DOUBLE_CONST, O3, (1 << 16,), "memory"),
        Fixture("PrecisionMismatch", False, "vadd", VADD_FLOAT_CONST, O3, (1 << 16,), "memory"),
        Fixture("Denormals", True, "vadd", MUL_CHAIN, O2, (1 << 14,), "compute", ("D",), extra={"dist": "subnormal"}),
        Fixture("Denormals", False, "vadd", MUL_CHAIN, O2, (1 << 14,), "compute", ("D",), extra={"dist": "normal"}),
        Fixture("ParallelContention", True, "sum", SUM_OMP_ATOMIC, O2 + ("-fopenmp",), (1 << 18,), "memory",
                ("P", "A")),
        Fixture("ParallelContention", False, "sum", SUM_OMP_REDUCTION, O2 + ("-fopenmp",), (1 << 18,), "memory",
                ("P", "A")),
        Fixture("InstructionOverhead", True, "vadd", VADD_INDEX_MATH, O2, (1 << 16,), "memory", ("V",)),
        Fixture("InstructionOverhead", False, "vadd", VADD_FLOAT_CONST, O3, (1 << 16,), "memory", ("V",)),
    ]


NB_SCALE = ("import numpy as np\n\n\ndef kernel(a, b, out, n):\n    for i in range(n):\n"
            "        out[i] = a[i] * 0.5 + b[i]\n")
"""numba: a float64 literal in an f32 kernel (numba types ``0.5`` as float64, so the arithmetic runs in double)."""
NB_SUM = ("import numpy as np\n\n\ndef kernel(x, out, n):\n    s = np.float32(0.0)\n    for i in range(n):\n"
          "        s += x[i]\n    out[0] = s\n")


def numba_fixtures() -> list[Fixture]:
    """The assembly-based fixtures in the numba backend (``extra["backend"] == "numba"``; flags ⊆ {fastmath}):
    PrecisionMismatch on ``a[i] * 0.5`` (fires) vs ``a[i] * np.float32(0.5)`` (silent), and ScalarFallback on an
    in-order sum (fires) vs the same loop under ``fastmath`` (silent)."""
    nb = {"backend": "numba"}
    return [
        Fixture("PrecisionMismatch", True, "vadd", NB_SCALE, (), (1 << 16,), "memory", extra=nb),
        Fixture("PrecisionMismatch", False, "vadd", NB_SCALE.replace("0.5", "np.float32(0.5)"), (), (1 << 16,),
                "memory", extra=nb),
        Fixture("ScalarFallback", True, "sum", NB_SUM, (), (1 << 20,), "memory", extra=nb),
        Fixture("ScalarFallback", False, "sum", NB_SUM, ("fastmath",), (1 << 20,), "memory", extra=nb),
    ]


def _numpy_fixture(name: str, shape: tuple[int, ...]) -> tuple[Callable[..., Any], tuple, int]:
    rng = np.random.default_rng(0)
    if name == "numpy:softmax_eager":
        x = rng.standard_normal(shape).astype(np.float32)
        return (lambda x: (lambda e: e / e.sum(axis=1, keepdims=True))(np.exp(x - x.max(axis=1, keepdims=True))),
                (x,), x.nbytes)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    out = np.empty_like(a)
    return (lambda a, b, out: np.add(a, b, out=out)), (a, b, out), out.nbytes


def profile_fixture(fx: Fixture, ceilings: Any, ruler_cache: dict[str, float],
                    valgrind_cache: dict[str, Any] | None = None) -> tuple[Profile, StubReport]:
    """Build the fixture and collect the signals its tool reads (valgrind's deterministic counts are reused from
    ``valgrind_cache`` when it holds them)."""
    from agentmill.methods.kernelpro import roofline

    task = get_task(fx.task)
    prof = Profile(fx.task, fx.shape, fx.flags)
    rep = StubReport(fx.cls)
    if fx.source.startswith("numpy:"):
        fn, args, out_bytes = _numpy_fixture(fx.source, fx.shape)
        prof.signals["alloc_peak_ratio"] = signals.alloc_peak_ratio(fn, args, out_bytes)
        return prof, rep
    if fx.extra.get("backend") == "numba":  # compiled in the sandboxed child; inspect_asm feeds the hot loop
        from agentmill.methods.kernelpro import numba_backend

        text, compile_s = numba_backend.inspect(fx.source, fx.flags, task)
        prof.hot, prof.loops = numba_backend.asm_signals(text)
        prof.signals["backend"] = "numba"
        return prof, rep
    if fx.source == "ruler:fma":
        n = fx.shape[0]
        t = roofline.time_kernels([(roofline.FMA_SRC["avx2"], ("-O2", V3, "-fopenmp"))],
                                   {"sets": [["x"]], "dims": [n], "out_shape": [1]},
                                   {"x": np.linspace(0.1, 1.6, 16).astype(np.float32)}, 1, stat="min")[0]
        prof.signals["compute_fraction"] = roofline.FMA_ACC * 8 * 2 * n / t / 1e9 / ceilings.p_peak(1)
        return prof, rep
    b = cbackend.compile_c(fx.source, fx.flags)
    if not b.ok:
        raise RuntimeError(f"fixture {fx.tool}/{fx.positive} failed to compile: {b.stderr[:400]}")
    hot, loops = signals.asm_signals(b.so_path)
    prof.hot, prof.loops = hot, loops
    syms = cbackend.undefined_symbols(b.so_path)
    prof.signals["uses_omp"] = any(s.startswith("GOMP_") for s in syms)
    import os

    prof.signals["cores"] = os.cpu_count()
    if "V" in fx.collect:
        caches = dict(ceilings.caches) if ceilings is not None else roofline.cache_geometry()
        if "ll_bytes" in fx.extra:
            caches["L2"] = fx.extra["ll_bytes"]
        if "ir" not in ruler_cache and fx.tool == "InstructionOverhead" and not valgrind_cache:
            rb = cbackend.compile_c(VADD, ("-O3", V3))
            ruler_cache["ir"] = signals.valgrind_signals(get_task("vadd"), rb.so_path, (1 << 16,), caches)["ir_per_elem"]
        if valgrind_cache:
            prof.signals.update(valgrind_cache)
        else:
            v = signals.valgrind_signals(task, b.so_path, fx.shape, caches, ruler_cache.get("ir"))
            prof.signals.update(v)
            if valgrind_cache is not None:
                valgrind_cache.update(v)
        prof.signals["working_set"] = task.bytes(fx.shape)
        prof.signals["l2_bytes"] = caches.get("L2")
    if "T" in fx.collect:
        prof.signals["t"] = signals.time_so(b.so_path, task, fx.shape, stat="min")
    if "S" in fx.collect:
        prof.signals["dispatch_share"] = signals.dispatch_share(task, b.so_path, fx.shape)
    if "R" in fx.collect:
        t = signals.time_so(b.so_path, task, fx.shape, stat="min")
        q = task.bytes(fx.shape)
        lvl = ceilings.level_of(q)
        prof.signals["bw_fraction"] = q / t / 1e9 / ceilings.bw(lvl)
        # the STREAM add ruler at the same working set, timed right after: what "saturated" means on this host now
        n = max(1024, int(q // 12))
        tr = roofline.time_kernels([(roofline.stream_src("add"), ("-O3", V3))],
                                    {"sets": [["b", "c"]], "dims": [n, 1], "out_shape": [n]},
                                    {"b": np.ones(n, np.float32), "c": np.ones(n, np.float32)}, 1, stat="min")[0]
        prof.signals["ruler_bw_fraction"] = 12 * n / tr / 1e9 / ceilings.bw(lvl)
    if "C" in fx.collect:
        t = signals.time_so(b.so_path, task, fx.shape, stat="min")
        prof.signals["compute_fraction"] = task.flops(fx.shape) / t / 1e9 / ceilings.p_peak(1)
    if "D" in fx.collect:
        dist = fx.extra["dist"]
        if dist == "subnormal":
            pairs = [(signals.time_so(b.so_path, task, fx.shape, scale=1e-39, stat="min"),
                      signals.time_so(b.so_path, task, fx.shape, stat="min"))
                     for _ in range(3)]  # alternating, median ratio: one pair on a loaded host is noise
            t_sub, t_norm = float(np.median([a / c for a, c in pairs])), 1.0
            x = task.make(fx.shape, np.random.default_rng(0), "normal")[0] * np.float32(1e-39)
        else:
            t_sub = t_norm = signals.time_so(b.so_path, task, fx.shape)
            x = task.make(fx.shape, np.random.default_rng(0), "normal")[0]
        tiny = np.finfo(np.float32).tiny
        prof.signals["subnormal_share"] = float(np.mean((x != 0) & (np.abs(x) < tiny)))
        prof.signals["denormal_slowdown"] = t_sub / t_norm
    if "P" in fx.collect:
        prof.signals["speedup_2t"] = signals.thread_speedup(b.so_path, task, fx.shape)
    return prof, rep
