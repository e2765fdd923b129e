"""The 15 rules. Each: a trigger on signals (thresholds from ``ToolThresholds``, absolute numbers from the measured
roofline), an analysis sentence, a recommendation with machine-readable action ids, and an expected gain capped by
the headroom. GPU counterparts after the paper's tool list as read by third parties [S]."""

from __future__ import annotations

from typing import Any

from agentmill.methods.kernelpro.config import ToolThresholds
from agentmill.methods.kernelpro.feedback import Finding, Profile, cap, severity
from agentmill.methods.kernelpro.tools import MicroTool, register_tool

VECTORIZABLE = {"vadd", "axpy", "gelu", "sum", "softmax_rows", "layernorm", "stencil5", "gemm", "max"}
"""[R] Tasks whose arithmetic can run in packed SIMD form (transpose moves data only)."""


def _h(report: Any) -> float | None:
    return getattr(report, "headroom", None)


def _finding(tool: str, metrics: dict[str, float], analysis: str, rec: str, actions: list[str],
             gain: tuple[float, float], report: Any, evidence: list[str] | None = None) -> Finding:
    g = cap(gain, _h(report))
    return Finding(tool, severity(g), {k: round(float(v), 6) for k, v in metrics.items()}, analysis, rec, actions, g,
                   evidence or [])


def scalar_fallback(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    h = p.hot
    if h is None or p.task not in VECTORIZABLE:
        return None
    scalar_libm = [c for c in h.calls if not c.startswith("_ZGV") and c.split("@")[0] in
                   {"expf", "exp", "tanhf", "tanh", "logf", "log", "sqrtf", "sqrt"}]
    if h.scalar_fp + h.packed_fp == 0 and not scalar_libm:
        return None
    if h.packed_share >= th.packed_share and not scalar_libm:
        return None
    return _finding("ScalarFallback", {"packed_share": h.packed_share, "scalar_fp": h.scalar_fp,
                                       "hot_loop_insns": h.n_insns},
                    f"The hot loop ({h.n_insns} instructions per iteration) performs {h.scalar_fp} scalar and "
                    f"{h.packed_fp} packed FP operations{' and calls scalar ' + scalar_libm[0] if scalar_libm else ''}: "
                    "the work runs one element at a time. Why: strict IEEE order forbids reassociating a reduction, "
                    "and scalar libm calls block vectorisation.",
                    "allow reassociation (fast-math) or keep independent partial sums; mark pointers restrict.",
                    ["fastmath", "accumulators", "restrict"], (2.0, 8.0), r)


def narrow_vectors(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    h = p.hot
    if h is None or h.packed_fp == 0:
        return None
    widest = "512" if any("native" in f for f in p.flags) and p.signals.get("avx512") else "256"
    share = h.packed_by_width.get(widest, 0) / h.packed_fp
    if share >= th.wide_share:
        return None
    return _finding("NarrowVectors", {"wide_share": share, "packed_fp": h.packed_fp},
                    f"Packed FP runs at {100 * (1 - share):.0f}% below the target's {widest}-bit width.",
                    "target the machine's vector width (-march, -mprefer-vector-width=256), align data.",
                    ["march_native"], (1.2, 2.0), r)


def stack_spill(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    h = p.hot
    if h is None or not (h.stack_reloads >= 1 or h.stack_ops > th.stack_ops):
        return None
    return _finding("StackSpill", {"stack_ops": h.stack_ops, "stack_reloads": h.stack_reloads},
                    f"The hot loop touches the stack {h.stack_ops} times per iteration ({h.stack_reloads} slot(s) "
                    "stored and reloaded): live values exceed the 16 vector registers and spill.",
                    "keep fewer live values: halve the accumulators or the unroll factor, split the loop.",
                    ["halve_accumulators"], (1.2, 2.0), r)


def strided_access(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    m = p.signals.get("d1_read_miss_ratio")
    if m is None:
        return None
    ideal = 4 / 64  # fp32, unit stride, 64-byte lines
    if m <= th.strided_miss_factor * ideal:
        return None
    return _finding("StridedAccess", {"d1_read_miss_ratio": m, "ideal": ideal},
                    f"Simulated L1 read-miss ratio {m:.3f} is {m / ideal:.1f}× the unit-stride ideal {ideal:.4f}: "
                    "accesses walk across cache lines.",
                    "interchange the loops, or block the traversal so each line is fully used.",
                    ["interchange", "tile"], (1.5, 4.0), r)


def cache_blocking(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    ll = p.signals.get("ll_misses_over_compulsory")
    ws, l2 = p.signals.get("working_set"), p.signals.get("l2_bytes")
    if ll is None or ws is None or l2 is None or ws <= l2 or ll <= th.blocking_miss_factor:
        return None
    b = 8 * int((l2 / 24) ** 0.5 // 8)
    return _finding("CacheBlocking", {"ll_misses_over_compulsory": ll, "working_set": ws, "tile": b},
                    f"Simulated last-level misses are {ll:.1f}× the compulsory misses with a working set of "
                    f"{ws / 2**20:.1f} MiB > L2: data is fetched again before it is reused.",
                    f"tile so three tiles fit in half of L2 (b = {b} for fp32).", ["tile"], (1.5, 4.0), r)


def thread_underuse(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    t = p.signals.get("t")
    if t is None:
        return None
    if not p.signals.get("uses_omp") and t > th.thread_min_s and (p.signals.get("cores") or 1) > 1:
        return _finding("ThreadUnderuse", {"t_s": t, "threads": 1},
                        f"The kernel is single-threaded and takes {t * 1e6:.0f} µs per call on a machine with "
                        f"{p.signals.get('cores')} cores.", "parallelise the outer loop with static chunks.",
                        ["parallel"], (1.3, 2.0), r)
    return None


def dispatch_overhead(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    s = p.signals.get("dispatch_share")
    if s is None or s <= th.dispatch_share:
        return None
    return _finding("DispatchOverhead", {"dispatch_share": s},
                    f"A fit t(n) = t0 + c·n over three sizes puts {100 * s:.0f}% of each call in fixed cost.",
                    "batch calls, move the Python loop into compiled code, fuse operators.", ["fuse", "batch"],
                    (1.0 / (1.0 - min(s, 0.95)) * 0.8, 1.0 / (1.0 - min(s, 0.95))), r)


def at_memory_roof(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    frac, ruler = p.signals.get("bw_fraction"), p.signals.get("ruler_bw_fraction")
    if frac is None or ruler is None or frac < th.roof_share * ruler:
        return None
    return _finding("AtMemoryRoof", {"bw_fraction": frac, "saturated_at": th.roof_share * ruler},
                    f"The kernel moves data at {100 * frac:.0f}% of the measured bandwidth of its level (the STREAM "
                    f"ruler reaches {100 * ruler:.0f}%): compute changes cannot help.",
                    "cut bytes: fuse passes, drop temporaries, write in place where allowed.", ["fuse"],
                    (1.0, 1.3), r)


def temporaries(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    a = p.signals.get("alloc_peak_ratio")
    if a is None or a <= th.temporaries_factor:
        return None
    return _finding("Temporaries", {"alloc_peak_ratio": a},
                    f"Peak allocation during a call is {a:.1f}× the output size: intermediate arrays round-trip "
                    "through memory.", "write into the output and fuse the expression into one loop.", ["fuse"],
                    (1.3, 3.0), r)


def branch_mispredict(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    rate, h = p.signals.get("mispredict_rate"), p.hot
    if rate is None or h is None or rate <= th.mispredict_rate or h.cond_branches < 1:
        return None
    return _finding("BranchMispredict", {"mispredict_rate": rate, "cond_branches": h.cond_branches},
                    f"Simulated conditional branches mispredict {100 * rate:.1f}% of the time and the hot loop has "
                    f"{h.cond_branches} data-dependent branch(es).",
                    "use a branchless select (min/max/blend) and hoist invariant tests.", ["branchless"],
                    (1.5, 4.0), r)


def library_delegation(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    frac = p.signals.get("compute_fraction")
    if frac is None or getattr(r, "cls", None) != "compute" or frac >= th.library_share:
        return None
    return _finding("LibraryDelegation", {"compute_fraction": frac},
                    f"A compute-bound kernel reaches {100 * frac:.0f}% of the measured FMA peak.",
                    "call sgemm when the policy allows it, or write a register-blocked micro-kernel "
                    "(6 × 16 fp32 = 12 ymm accumulators).", ["blas", "microkernel"], (2.0, 10.0), r)


def precision_mismatch(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    loops = p.loops or ([p.hot] if p.hot else [])
    conv = sum(lp.f2d_conv for lp in loops)
    f64 = sum(lp.fp64 for lp in loops)
    calls = [c for lp in loops for c in lp.calls if c.split("@")[0] in {"exp", "tanh", "log", "sqrt", "pow"}]
    if conv == 0 and f64 == 0 and not calls:
        return None
    return _finding("PrecisionMismatch", {"f2d_conversions": conv, "fp64_ops": f64, "double_libm_calls": len(calls)},
                    f"An fp32 kernel converts float↔double {conv} time(s) and runs {f64} fp64 operation(s)"
                    f"{' and calls ' + calls[0] if calls else ''} inside its loops: an untyped constant promotes "
                    "the arithmetic to double.", "type constants and calls as float (0.5f, expf, sqrtf).",
                    ["const_f32"], (1.2, 2.0), r)


def denormals(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    share, slow = p.signals.get("subnormal_share"), p.signals.get("denormal_slowdown")
    if share is None or slow is None or share < th.denormal_share or slow < th.denormal_slowdown:
        return None
    return _finding("Denormals", {"subnormal_share": share, "denormal_slowdown": slow},
                    f"{100 * share:.0f}% of the inputs are subnormal and the call is {slow:.1f}× slower than on the "
                    "same data rescaled to the normal range.",
                    "flush denormals to zero (fast-math startup code) or rescale; FTZ changes results near zero.",
                    ["ftz"], (1.5, slow), r)


def parallel_contention(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    sp, h = p.signals.get("speedup_2t"), p.hot
    if sp is None or h is None or h.lock == 0 or sp >= th.contention_speedup:
        return None
    return _finding("ParallelContention", {"speedup_2t": sp, "locked_insns": h.lock},
                    f"Two threads give {sp:.2f}× and the hot loop holds {h.lock} lock-prefixed instruction(s): the "
                    "threads serialise on a shared accumulator.",
                    "keep private, 64-byte padded accumulators and combine once (a reduction clause).",
                    ["private_accum"], (1.5, 2.0), r)


def instruction_overhead(p: Profile, r: Any, th: ToolThresholds) -> Finding | None:
    ir, ruler = p.signals.get("ir_per_elem"), p.signals.get("ir_ruler_per_elem")
    if ir is None or ruler is None or ir <= th.ir_factor * ruler:
        return None
    return _finding("InstructionOverhead", {"ir_per_elem": ir, "ruler_ir_per_elem": ruler},
                    f"The kernel retires {ir:.2f} instructions per element, {ir / ruler:.1f}× the ruler's minimum "
                    "for its operation class: index arithmetic and checks dominate the work.",
                    "remove bounds checks, hoist invariants and index arithmetic out of the loop.", ["hoist"],
                    (1.3, 3.0), r)


C, M, L, X = "compute", "memory", "latency", "mixed"
for _t in (
    MicroTool("ScalarFallback", frozenset({C, X, M}), frozenset({"A"}), "SASS scalar fallback; Vectorization",
              scalar_fallback),
    MicroTool("NarrowVectors", frozenset({C, M}), frozenset({"A"}), "Vectorization (LDG.E.128 vs LDG.E)",
              narrow_vectors),
    MicroTool("StackSpill", frozenset({L, C, X}), frozenset({"A"}), "RegisterSpill (STL/LDL)", stack_spill),
    MicroTool("StridedAccess", frozenset({M, X}), frozenset({"V"}), "MemoryCoalescing; Uncoalesced", strided_access),
    MicroTool("CacheBlocking", frozenset({M, X, C}), frozenset({"V"}), "SharedMemTiling", cache_blocking),
    MicroTool("ThreadUnderuse", frozenset({C, M, X}), frozenset({"T"}), "OccupancyLimiter", thread_underuse),
    MicroTool("DispatchOverhead", frozenset({L, "any"}), frozenset({"S"}), "LaunchOverhead (nsys)",
              dispatch_overhead),
    MicroTool("AtMemoryRoof", frozenset({M}), frozenset({"R"}), "HighDRAMThroughput", at_memory_roof),
    MicroTool("Temporaries", frozenset({M, X, "any"}), frozenset({"M"}), "extra kernels / memory round trips",
              temporaries),
    MicroTool("BranchMispredict", frozenset({C, L, X, M}), frozenset({"V", "A"}), "warp divergence",
              branch_mispredict),
    MicroTool("LibraryDelegation", frozenset({C}), frozenset({"C"}), "TensorCore / cuBLAS", library_delegation),
    MicroTool("PrecisionMismatch", frozenset({"any"}), frozenset({"A"}), "(precision policy)", precision_mismatch),
    MicroTool("Denormals", frozenset({C, "any"}), frozenset({"D"}), "(-ftz=true on GPU)", denormals),
    MicroTool("ParallelContention", frozenset({C, M, X, L}), frozenset({"P", "A"}), "BarrierStall / atomics",
              parallel_contention),
    MicroTool("InstructionOverhead", frozenset({C, L, X, M}), frozenset({"V"}), "WarpStall (issue-bound)",
              instruction_overhead),
):
    register_tool(_t)
