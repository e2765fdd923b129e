"""The pyrepo arm's shared concepts: the LM-free critic names, the seeded instances with their candidate pools, how
a pool is measured (critics and oracle, resumable JSONL) and how recorded candidates become ordered per-instance
trajectories (used by ``pyrepo``, ``live`` and ``lm``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
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


CANDIDATE_ORDER = {"revert": 0, "noop": 1, "same_site": 2, "partial": 2, "wrong_site": 3}
"""Candidate preference when a pool keeps the first ``candidates`` of an instance."""


def seeded_instances(packages: Sequence[str], counts: Sequence[int], *, seed: int, candidates: int,
                     work: Path) -> list[tuple[Any, Any, Any, list[Any]]]:
    """``(repo, critics, task, candidates)`` per seeded instance: ``counts[i]`` bugs of ``packages[i]`` (``fixture``
    is the in-code package, built under ``work``), each with its first ``candidates`` candidates."""
    from agentmill.envs.pyrepo import default_critics, fixture_repo, make_candidates, open_repo, seed_bugs

    out = []
    for spec, n in zip(packages, counts):
        repo = fixture_repo(work / "fixture") if spec == "fixture" else open_repo(spec)
        log = work / f"mining-{repo.key if hasattr(repo, 'key') else spec}.jsonl" if spec == "fixture" else None
        critics = default_critics(repo)
        for task in seed_bugs(repo, n, seed=seed, log=log)[:n]:
            cands = sorted(make_candidates(task, repo, seed=seed),
                           key=lambda c: (CANDIDATE_ORDER.get(c.kind, 9), c.cand_id))
            out.append((repo, critics, task, cands[:candidates]))
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a pool file (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def measure_pool(insts: list[tuple[Any, Any, Any, list[Any]]], path: Path,
                 progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """One row per (instance, candidate): critic outcomes and seconds, oracle label and seconds. Resumable: the
    instances already in ``path`` are read back, each new instance is appended (fsynced) as it completes."""
    from agentmill.envs.pyrepo import verify

    want = {task.instance_id for _, _, task, _ in insts}
    rows = [r for r in read_rows(path) if r["instance_id"] in want]
    done = {r["instance_id"] for r in rows}
    for repo, critics, task, cands in insts:
        if task.instance_id in done:
            continue
        new = []
        for c in cands:
            verify(c, task, repo)
            outs = {name: cr.check(task, c) for name, cr in critics.items()}
            new.append({"instance_id": task.instance_id, "candidate_id": c.cand_id, "kind": c.kind, "repo": task.repo,
                        "y": bool(c.y), "oracle_s": c.oracle_wall_s, "oracle_cpu_s": c.oracle_cpu_s,
                        "critics": {k: o.passed for k, o in outs.items()},
                        "critic_s": {k: o.wall_s for k, o in outs.items()}, "diff_lines": c.diff.count("\n")})
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in new))
            f.flush()
            os.fsync(f.fileno())
        rows += new
        if progress is not None:
            progress(len({r["instance_id"] for r in rows}), len(insts))
    return rows
