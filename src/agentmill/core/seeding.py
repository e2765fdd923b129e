"""Seeding. Work units get independent, order-free random streams from a tuple of keys.

``rng_for(seed, "prompt", 3)`` is the same stream whatever order units run in, and whichever process (or Ray
worker) runs them: that is what makes serial, pool and Ray executors give identical results.
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np


def derive_seed(*keys: object) -> int:
    """A 63-bit seed from any printable keys; stable across processes and Python versions (not ``hash()``)."""
    h = hashlib.sha256("\x1f".join(repr(k) for k in keys).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def rng_for(*keys: object) -> np.random.Generator:
    """An independent numpy Generator for the unit named by ``keys``."""
    return np.random.default_rng(derive_seed(*keys))


def seed_everything(seed: int) -> None:
    """Seed Python, numpy's legacy global RNG and torch (if it is already imported)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
