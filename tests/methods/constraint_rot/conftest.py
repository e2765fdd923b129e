"""Fixtures shared by the constraint-rot tests."""

from __future__ import annotations

import pytest

from agentmill.envs.office import OfficeSandbox


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    """An office sandbox without the SMTP/HTTP servers, one per test module (episodes reset it)."""
    with OfficeSandbox(0, smtp=False, http=False) as sb:
        yield sb
