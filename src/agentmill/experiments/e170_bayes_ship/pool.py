"""The pyrepo arm's shared concepts: the LM-free critic names and how recorded candidates become ordered
per-instance trajectories (used by ``pyrepo`` and ``lm``)."""

from __future__ import annotations

from typing import Any

import numpy as np

CRITICS = ("L0_syntax", "L1_lint", "L2_public", "L2_targeted")
"""The LM-free critics of ``envs.pyrepo.default_critics``."""


def trajectories(rows: list[dict[str, Any]], seed: int) -> list[list[Any]]:
    """Per instance, its candidates in the order of a pool generator with the IID kernel (b₀ = share correct)."""
    from agentmill.core.seeding import rng_for
    from agentmill.methods.bayes_ship.replay import CandidateRecord

    b0 = float(np.mean([r["y"] for r in rows]))
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["instance_id"], []).append(r)
    out = []
    for iid, rs in by.items():
        rng = rng_for("bayes_ship.pyrepo.order", iid, seed)
        good = [r for r in rs if r["y"]]
        bad = [r for r in rs if not r["y"]]
        seq = []
        while good or bad:
            want = rng.random() < b0
            side = good if (want and good) or not bad else bad
            seq.append(side.pop(int(rng.integers(len(side)))))
        out.append([CandidateRecord(iid, r["candidate_id"], j, dict(r["critics"]), bool(r["y"]), None,
                                    dict(r["critic_s"]), r["oracle_s"], "", "pyrepo-pool", r["repo"],
                                    {"kind": r["kind"]}) for j, r in enumerate(seq)])
    return out
