"""Every rule of the tools, metrics, case file and loop, one check each (the battery e169.sherloc_tools runs)."""

from __future__ import annotations

import pytest

from agentmill.experiments.e169_sherloc.battery import CHECKS


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_check(name: str) -> None:
    assert CHECKS[name]() is True
