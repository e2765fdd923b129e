from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smol():
    """The embedded SmolLM2, loaded once per test session (GGUF on the first ever load, then a local cache)."""
    from agentmill.lm import load_lm

    return load_lm("hf:smollm2")
