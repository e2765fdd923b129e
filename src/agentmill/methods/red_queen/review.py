"""A Red Queen search over ReviewWorld in one call (the CLI's ``red-queen run`` and the E178 experiments use it).

The world checks WC-1..WC-4 run first (cached per world seed and constants); a failing check refuses the run and
names the check.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from agentmill.envs.review_world import ReviewWorld, WorldConstants
from agentmill.methods.red_queen.challengers import ReviewSlot
from agentmill.methods.red_queen.config import RedQueenConfig
from agentmill.methods.red_queen.search import RedQueenSearch
from agentmill.methods.red_queen.writers import ReviewWorkspace


@lru_cache(maxsize=64)
def world_checks(seed: int, constants: WorldConstants = WorldConstants()) -> dict[str, dict[str, Any]]:
    """WC-1..WC-4 of the world with this seed (they do not depend on the variant: WC-4 reads oracle labels)."""
    return ReviewWorld("review", seed, constants).world_checks()


def failing_checks(checks: dict[str, dict[str, Any]]) -> list[str]:
    return [k for k, v in checks.items() if not v["pass"]]


def build_review_search(variant: str = "review", config: RedQueenConfig = RedQueenConfig(), *,
                        world_seed: int | None = None, ledger_dir: str | Path | None = None,
                        constants: WorldConstants = WorldConstants(), check_world: bool = True,
                        bookkeeping: str = "incremental") -> tuple[RedQueenSearch, ReviewWorld, ReviewSlot]:
    """(search, world, slot). ``world_seed`` defaults to ``config.seed``."""
    ws = config.seed if world_seed is None else world_seed
    if check_world:
        checks = world_checks(ws, constants)
        bad = failing_checks(checks)
        if bad:
            raise RuntimeError(f"ReviewWorld seed {ws} fails world check(s) {', '.join(bad)}: "
                               + "; ".join(f"{k}: {checks[k]}" for k in bad) + " — no claim runs on this world")
    world = ReviewWorld(variant, ws, constants)
    slot = ReviewSlot(world, n_challengers=config.n_challengers, trap=config.trap,
                      audit_labels_per_checkpoint=config.audit_labels_per_checkpoint)
    describe = {"world": variant, "world_seed": ws, "constants": constants.to_dict(),
                "incumbent_w0": world.incumbent().w0}
    search = RedQueenSearch(ReviewWorkspace(world), {0: slot}, config, ledger_dir, bookkeeping=bookkeeping,
                            describe=describe)
    return search, world, slot
