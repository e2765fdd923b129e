"""Red Queen Gödel Machine (E178): self-improvement whose judge co-evolves, with stale utility erased.

A search over agent variants runs in epochs with each judge frozen inside one; at exponentially spaced checkpoints
challenger judges are tested against the incumbent on a sealed anchor, and a replacement invalidates (never
deletes) every utility record that depended on the displaced judge. See docs/methods/red_queen.md.
"""

from agentmill.methods.red_queen.anchor import PairedCounts, SealedAnchor
from agentmill.methods.red_queen.archive import ArchiveView, Node
from agentmill.methods.red_queen.config import RedQueenConfig
from agentmill.methods.red_queen.ledger import RoleSpec, UtilityLedger, UtilityRecord
from agentmill.methods.red_queen.review import build_review_search, world_checks
from agentmill.methods.red_queen.search import RedQueenSearch, RunResult, final_pick
from agentmill.methods.red_queen.stats import best_belief, checkpoints, mcnemar_replace

__all__ = ["ArchiveView", "Node", "PairedCounts", "RedQueenConfig", "RedQueenSearch", "RoleSpec", "RunResult",
           "SealedAnchor", "UtilityLedger", "UtilityRecord", "best_belief", "build_review_search", "checkpoints",
           "final_pick", "mcnemar_replace", "world_checks"]
