from __future__ import annotations

import subprocess
import sys

from agentmill.core.seeding import derive_seed, rng_for


def test_streams_are_keyed_and_order_free() -> None:
    a = rng_for(7, "prompt", 3).random(4)
    rng_for(7, "prompt", 2).random(100)  # drawing another stream first changes nothing
    assert (rng_for(7, "prompt", 3).random(4) == a).all()
    assert not (rng_for(7, "prompt", 4).random(4) == a).all()


def test_derive_seed_is_stable_across_processes() -> None:
    here = derive_seed("a", 1, (2, 3))
    code = "from agentmill.core.seeding import derive_seed; print(derive_seed('a', 1, (2, 3)))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.strip()
    assert int(other) == here and 0 <= here < 2**63
