"""E177 K-14: the GPU tools work at the static level (docs/methods/kernelpro.md, GPU path).

CUDA fixtures compiled with nvcc for sm_80 and sm_90 on this GPU-less machine; ptxas ``-v`` and SASS
(cuobjdump/nvdisasm from PyPI) classify: spill / local array / no spill; vector / scalar loads; tensor-core opcodes
present / absent; and the occupancy calculator matches hand computations for 4 configurations per arch. Without
nvcc the run records "precondition not met". Dynamic checks (ncu, nsys, the occupancy API) need a lent GPU and are
not run here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e177_kernelpro import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

FIXTURES = {
    "scale": ('extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n) {\n'
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n",
              {"LocalMemory": False, "RegisterSpill": False, "Vectorization": True}, {"contiguous": True}),
    "vec4": ('extern "C" __global__ void vec4(const float4* __restrict__ x, float4* __restrict__ y, int n) {\n'
             "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) { float4 v = x[i]; v.x *= 2; v.y *= 2; "
             "v.z *= 2; v.w *= 2; y[i] = v; }\n}\n", {"Vectorization": False}, {"contiguous": True}),
    "localarr": ('extern "C" __global__ void localarr(const float* x, float* y, int n, int k) {\n'
                 "    float a[256];\n    for (int j = 0; j < 256; j++) a[j] = x[(j * 7) % n];\n"
                 "    y[threadIdx.x] = a[k & 255];\n}\n", {"LocalMemory": True, "RegisterSpill": False}, {}),
    "spill": ('extern "C" __global__ void __launch_bounds__(1024, 2) spill(const float* x, float* y, int n) {\n'
              "    float v[48];\n#pragma unroll\n    for (int j = 0; j < 48; j++) v[j] = x[threadIdx.x + j * n];\n"
              "    float s = 0.0f;\n#pragma unroll\n    for (int r = 0; r < 8; r++)\n#pragma unroll\n"
              "        for (int j = 0; j < 48; j++) { v[j] = v[j] * v[(j + r) % 48] + 1.0f; s += v[j]; }\n"
              "    y[threadIdx.x] = s;\n}\n", {"RegisterSpill": True}, {"extra": ("-maxrregcount=32",)}),
    "mm_tc": ("#include <mma.h>\nusing namespace nvcuda;\n"
              'extern "C" __global__ void mm_tc(const half* a, const half* b, float* c) {\n'
              "    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n"
              "    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n"
              "    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n    wmma::fill_fragment(fc, 0.0f);\n"
              "    wmma::load_matrix_sync(fa, a, 16); wmma::load_matrix_sync(fb, b, 16);\n"
              "    wmma::mma_sync(fc, fa, fb, fc);\n    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);\n}\n",
              {"TensorCore": False}, {"matmul_like": True}),
    "mm_naive": ('extern "C" __global__ void mm_naive(const float* a, const float* b, float* c, int n) {\n'
                 "    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    if (i < n && j < n) { float s = 0.0f; for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];"
                 " c[i * n + j] = s; }\n}\n", {"TensorCore": True}, {"matmul_like": True}),
}
"""fixture → (source, expected tool firings, options). Expected values come from what each kernel is written to
do (a 256-float dynamically indexed array is local memory without spills; -maxrregcount=32 with 48 live values
spills; float4 accesses are 128-bit; wmma is tensor-core code)."""
OCCUPANCY_CASES = [  # (regs, threads/block, smem/block, {arch: (occupancy, limiter)}) computed by hand
    (32, 256, 0, {"sm_80": (1.0, "warps"), "sm_90": (1.0, "warps")}),
    (128, 256, 0, {"sm_80": (0.25, "registers"), "sm_90": (0.25, "registers")}),
    (32, 128, 48 * 1024, {"sm_80": (0.1875, "shared memory"), "sm_90": (0.25, "shared memory")}),
    (64, 64, 0, {"sm_80": (0.5, "registers"), "sm_90": (0.5, "registers")}),
]


@dataclass(frozen=True)
class Setup:
    archs: tuple[str, ...] = ("sm_80", "sm_90")
    fixtures: tuple[str, ...] = tuple(FIXTURES)


SETUPS = {"smoke": Setup(archs=("sm_90",), fixtures=("scale",)), "quick": Setup(archs=("sm_90",),
          fixtures=("localarr",)), "full": Setup()}
QUICK_CHECK = "quick compiles 1 fixture for sm_90 (pipeline check); full compiles 6 fixtures for sm_80 and sm_90"
EXACT = "a share over a fixed battery of compiled fixtures and hand-computed configurations"
CLAIMS = (
    Claim("E177-K14-class", "The static GPU tools classify every CUDA fixture correctly (spill / local array / none, "
          "vector / scalar loads, tensor cores present / absent).", "[R]", "—", "k14_class_share", ">=", 1.0,
          judge_on="exact", exact_why=EXACT),
    Claim("E177-K14-occ", "The static occupancy calculator equals the hand computation (4 configurations per arch).",
          "[R] occupancy-calculator conventions", "—", "k14_occupancy_share", ">=", 1.0, judge_on="exact",
          exact_why=EXACT),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.kernelpro import cuda

    occ_rows = []
    for regs, tpb, smem, want in OCCUPANCY_CASES:
        for arch in s.archs:
            occ, blocks, lim = cuda.occupancy(regs, tpb, smem, arch)
            occ_rows.append({"regs": regs, "threads": tpb, "smem": smem, "arch": arch, "occupancy": occ,
                             "limiter": lim, "ok": abs(occ - want[arch][0]) < 1e-9 and lim == want[arch][1]})
    out = {"k14_occupancy_share": Estimate.exact(float(np.mean([r["ok"] for r in occ_rows])), n=len(occ_rows))}
    ctx.data["occupancy"] = occ_rows
    try:
        cuda.nvcc()
        cuda.cuobjdump()
    except cuda.ToolMissing as e:
        ctx.data["precondition"] = f"precondition not met: {e}"
        return out
    rows = []
    for arch in s.archs:
        for name in s.fixtures:
            src, want, opts = FIXTURES[name]
            cubin, infos, _ = cuda.compile_cuda(src, arch, tuple(opts.get("extra", ())))
            hist = cuda.sass(cubin)
            info = infos[name]
            found = cuda.static_findings(name, info, hist.get(name, hist.get(next(iter(hist), ""), {})),
                                         matmul_like=opts.get("matmul_like", False),
                                         contiguous=opts.get("contiguous", False), arch=arch)
            checks = {tool: (tool in found) == fire for tool, fire in want.items()}
            rows.append({"arch": arch, "fixture": name, "ptxas": info.__dict__, "findings": found,
                         "expected": want, "ok": all(checks.values()),
                         "sass_top": dict((hist.get(name) or {}).most_common(12)) if hist.get(name) else {}})
            ctx.progress("cuda fixtures", len(rows), len(s.archs) * len(s.fixtures))
    ctx.data["fixtures"] = rows
    ctx.data["gpu"] = "none: dynamic checks (ncu, nsys, occupancy API) not run"
    out["k14_class_share"] = Estimate.exact(float(np.mean([r["ok"] for r in rows])), n=len(rows))
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data.get("occupancy", [])
    fig, ax = plt.subplots(figsize=(5, 2.8))
    labels = [f"{r['arch']} r{r['regs']} t{r['threads']} s{r['smem'] // 1024}K" for r in rows]
    ax.barh(range(len(rows)), [r["occupancy"] for r in rows], color=["tab:green" if r["ok"] else "tab:red"
                                                                     for r in rows])
    ax.set_yticks(range(len(rows)), labels, fontsize=6)
    ax.set_xlabel("theoretical occupancy")
    ax.set_title("Static occupancy calculator (green = equals hand computation)", fontsize=8)
    fig.tight_layout()
    p = out / "kernelpro_cuda_occupancy.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e177.kernelpro_cuda_static",
    quick_budget_s=8,
    quick_check=QUICK_CHECK,
    parallel_safe=True,
    title="E177 KernelPro: GPU tools at the static level (nvcc, ptxas, SASS, occupancy)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="No GPU here: CUDA fixtures compiled for sm_80/sm_90 and inspected statically; the paper profiles "
               "live kernels with ncu/nsys on A100/H100.",
)
