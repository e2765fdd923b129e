"""A step-zero throughput probe for run records: prefill tok/s and decode tok/s at a few batch sizes.

Every experiment that samples from a local model records this next to its results [R], so a
slow or contended machine is visible in the record instead of silently stretching wall times. It costs a few
seconds; ``benchmarks/lm_throughput.py`` is the full benchmark.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence


def throughput_probe(lm: Any, *, prefill_len: int = 128, batches: Sequence[int] = (1, 4, 8, 16),
                     steps: int = 4) -> dict[str, float]:
    """Median-free single pass (cheap): prefill of ``prefill_len`` tokens at batch 1, then ``steps`` decode steps
    per batch size from a forked prefill. Works with any white-box LM (``forward``, ``fork_cache``)."""
    import torch

    ids = (lm.encode("Question: What is 12 + 30 + 7? Solution: 12 + 30 = 42. 42 + 7 = 49. Answer: 49. ") * 20)
    ids = ids[:prefill_len]
    out: dict[str, float] = {"load_average": os.getloadavg()[0], "threads": float(torch.get_num_threads())}
    t0 = time.perf_counter()
    cache = lm.forward(torch.tensor([ids])).cache
    out["prefill_tok_s"] = prefill_len / (time.perf_counter() - t0)
    for b in batches:
        c = lm.fork_cache(cache, b)
        tok = torch.full((b, 1), ids[-1], dtype=torch.long)
        t0 = time.perf_counter()
        for _ in range(steps):
            c = lm.forward(tok, c).cache
        out[f"decode_tok_s_b{b}"] = b * steps / (time.perf_counter() - t0)
    return out
