"""Metis tests run codified tools in the sandbox child: without bubblewrap on this machine they accept the
python-only layers (static policy, rlimits, seccomp, audit hook), as the sandbox's own tests do."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _sandbox_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentmill.core import bubblewrap

    if bubblewrap.probe() is not None:
        monkeypatch.setenv(bubblewrap.ENV_MODE, "python-only")
