"""The GPU path, designed and tested statically: CUDA candidates compiled with nvcc to a cubin, ptxas ``-v``
reports parsed, SASS disassembled by ``cuobjdump -sass`` (PyPI ``nvidia-cuda-cuobjdump`` + ``nvidia-cuda-nvdisasm``)
into an opcode histogram, a static occupancy calculator, and the statically testable GPU tools. Dynamic profiling
(ncu, nsys) needs a GPU: on a machine without one nothing here tries to run a kernel."""

from __future__ import annotations

import glob
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass

SMEM_PER_SM = {"sm_80": 164 * 1024, "sm_90": 228 * 1024}
"""Shared memory per SM usable by blocks (NVIDIA occupancy calculator conventions)."""
MAX_WARPS, MAX_BLOCKS, REGS_PER_SM, REG_GRANULE, SMEM_RESERVED = 64, 32, 65536, 256, 1024


class ToolMissing(RuntimeError):
    pass


def nvcc() -> str:
    p = shutil.which("nvcc") or next(iter(glob.glob("/usr/local/cuda*/bin/nvcc")), None)
    if not p:
        raise ToolMissing("install the CUDA compiler or skip: static GPU checks need nvcc")
    return p


def cuobjdump() -> tuple[str, dict[str, str]]:
    """cuobjdump and the environment that lets it find nvdisasm (both may come from PyPI wheels)."""
    cands = [shutil.which("cuobjdump")]
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        for root in (spec.submodule_search_locations or []) if spec else []:
            cands += glob.glob(os.path.join(root, "**", "bin", "cuobjdump"), recursive=True)
    except (ImportError, ValueError):
        pass
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c, {**os.environ, "NVDISASM_PATH": os.path.dirname(c), "PATH": os.path.dirname(c) + ":" +
                       os.environ.get("PATH", "")}
    raise ToolMissing("pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm (SASS needs cuobjdump)")


@dataclass
class PtxasInfo:
    kernel: str
    registers: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    smem_bytes: int = 0
    barriers: int = 0


def parse_ptxas(text: str) -> dict[str, PtxasInfo]:
    """Per-kernel numbers from ``ptxas -v`` output."""
    out: dict[str, PtxasInfo] = {}
    cur: PtxasInfo | None = None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            cur = out.setdefault(m.group(1), PtxasInfo(m.group(1)))
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.stack_bytes, cur.spill_stores, cur.spill_loads = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur.registers = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            cur.barriers = int(b.group(1)) if b else 0
            s = re.search(r"(\d+) bytes smem", line)
            cur.smem_bytes = int(s.group(1)) if s else 0
    return out


def compile_cuda(source: str, arch: str = "sm_90", extra: tuple[str, ...] = ()) -> tuple[bytes, dict[str, PtxasInfo], str]:
    """(cubin bytes, ptxas info per kernel, stderr) of ``source`` for ``arch`` (works without a GPU)."""
    if "__global__" not in source:
        raise ValueError("not a CUDA source (no __global__ kernel): the CPU backend takes C sources")
    d = tempfile.mkdtemp(prefix="kernelpro-cu-")
    try:
        src = os.path.join(d, "k.cu")
        with open(src, "w") as f:
            f.write(source)
        r = subprocess.run([nvcc(), "-x", "cu", f"-arch={arch}", "-cubin", "-Xptxas", "-v", *extra, "-o",
                            os.path.join(d, "k.cubin"), src], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed: {r.stderr[-800:]}")
        with open(os.path.join(d, "k.cubin"), "rb") as f:
            return f.read(), parse_ptxas(r.stderr + r.stdout), r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


OPCODE = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def parse_sass(text: str) -> dict[str, Counter]:
    """``cuobjdump -sass`` text → per function, a histogram of full opcodes (``LDG.E.128``, ``HMMA.16816.F32`` …)."""
    out: dict[str, Counter] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Function : ([\w$]+)", line)
        if m:
            cur = out.setdefault(m.group(1), Counter())
            continue
        m = OPCODE.search(line)
        if m and cur is not None:
            cur[m.group(1)] += 1
    return out


def sass(cubin: bytes) -> dict[str, Counter]:
    exe, env = cuobjdump()
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        r = subprocess.run([exe, "-sass", f.name], capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {r.stderr[-400:]}")
    return parse_sass(r.stdout)


def occupancy(registers: int, threads_per_block: int, smem_block: int, arch: str) -> tuple[float, int, str]:
    """(theoretical occupancy, resident blocks per SM, the binding limit) by the occupancy-calculator formula:
    blocks = min(⌊64 / warps⌋, 32, ⌊65536 / (⌈regs·32 / 256⌉·256 · warps)⌋, ⌊smem_SM / (smem_block + 1 KiB)⌋)."""
    warps = math.ceil(threads_per_block / 32)
    per_warp = math.ceil(registers * 32 / REG_GRANULE) * REG_GRANULE
    limits = {"warps": MAX_WARPS // warps, "blocks": MAX_BLOCKS,
              "registers": REGS_PER_SM // (per_warp * warps) if per_warp else MAX_BLOCKS,
              "shared memory": SMEM_PER_SM[arch] // (smem_block + SMEM_RESERVED)}
    blocks = min(limits.values())
    limiter = next(k for k, v in limits.items() if v == blocks)
    return blocks * warps / MAX_WARPS, blocks, limiter


def static_findings(kernel: str, info: PtxasInfo, hist: Counter, *, matmul_like: bool = False,
                    contiguous: bool = False, threads_per_block: int = 256, arch: str = "sm_90") -> dict[str, str]:
    """The statically testable GPU tools: tool → finding (absent when silent)."""
    f: dict[str, str] = {}
    if info.spill_stores or info.spill_loads:
        f["RegisterSpill"] = f"spill: {info.spill_stores} B stores, {info.spill_loads} B loads"
    elif info.stack_bytes:
        f["LocalMemory"] = f"local array: {info.stack_bytes} B stack frame, no spill"
    if info.registers > 96:
        f["HighRegisterUsage"] = f"{info.registers} registers per thread (> 96)"
    loads = {k: v for k, v in hist.items() if k.startswith("LDG")}
    if contiguous and loads and not any(".128" in k or ".64" in k for k in loads):
        f["Vectorization"] = "contiguous fp32 accesses use scalar LDG.E (no .64/.128)"
    if matmul_like and not any(k.startswith(("HMMA", "HGMMA", "IMMA")) for k in hist):
        f["TensorCore"] = "matmul-like kernel without tensor-core opcodes"
    if matmul_like and not any(k.startswith(("LDS", "STS")) for k in hist):
        f["SharedMemTiling"] = "matmul-like kernel without shared-memory tiles"
    occ, blocks, lim = occupancy(info.registers, threads_per_block, info.smem_bytes, arch)
    if occ < 0.5:
        f["OccupancyLimiter"] = f"theoretical occupancy {occ:.2f} limited by {lim}"
    return f
