"""The archive: a tree of agent variants (nodes), and the read-only view challenger generators get.

Parent and evaluation choice follow HGM's clade metaproductivity (CMP) [C]: a node's worth is the success record of
its whole subtree, and Thompson sampling draws θ ~ Beta(1 + S_clade, 1 + F_clade) per node and takes the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.methods.red_queen.ledger import UtilityLedger


@dataclass(frozen=True)
class Node:
    node_id: int
    parent: int | None
    state: Any
    """The workspace's JSON-able description of the variant (a writer's θ, a prompt)."""
    created_at: int
    """n_evals when the node was added."""


def thompson_pick(ledger: UtilityLedger, rng: np.random.Generator) -> int:
    """argmax over nodes of θ ~ Beta(1 + S_clade, 1 + F_clade) from valid records (one vectorised draw)."""
    S, F = ledger.clade_counts()
    return int(np.argmax(rng.beta(1.0 + S, 1.0 + F)))


@dataclass(frozen=True)
class ArchiveRecord:
    """What a challenger generator may read of one utility record (no anchor, no labels)."""

    node: int
    role: str
    outcome: int
    tag: str | None
    valid: bool
    at_eval: int
    artifact: Any


@dataclass(frozen=True)
class ArchiveView:
    """A snapshot of the archive for challenger generators: nodes and records of the ending epoch. It holds no
    reference to any anchor (a test walks its object graph)."""

    nodes: tuple[Node, ...]
    records: tuple[ArchiveRecord, ...]
    """Records of ``slot`` tagged with the incumbent's id (the ending epoch), in evaluation order."""
    slot: int
    incumbent_id: str
    at_eval: int
    epoch: int
