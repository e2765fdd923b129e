"""``agentmill red-queen``: placeholder while the method is built (replaced by its thin CLI face)."""

from __future__ import annotations


def register(sub) -> None:
    pass
