"""Which CPU ran something: timing records and result summaries name it, because hosts differ (AVX2-only and AVX-512
machines have both run this project) and a speed ratio is comparable only within one host."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16")
"""The vector extensions that change this project's timings (int8/bf16 kernels, wide GEMMs)."""


THREAD_CAP_ENV = "AGENTMILL_THREAD_CAP"
"""Set by the main job's pool in its one-core workers: no model there may take more torch threads than this."""


def capped_threads(requested: int) -> int:
    """``requested`` torch threads, lowered to ``$AGENTMILL_THREAD_CAP`` when set. A setup that asks for 2 threads
    (right when it runs alone) would otherwise oversubscribe the two cores the pool's workers already fill."""
    cap = os.environ.get(THREAD_CAP_ENV)
    return max(1, min(int(requested), int(cap))) if cap else int(requested)


def host_cpu(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """This machine's CPU model name and which of :data:`CPU_FLAGS` it has (``platform`` without /proc)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return {"model": platform.processor() or "unknown", "flags": []}
    model, flags = "unknown", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return {"model": model, "flags": [f for f in CPU_FLAGS if f in flags]}
