"""Input and output files of the credit-assignment commands (``agentmill envs|g2po|progress``).

Inputs are checked before any work, and every problem becomes one ``ValueError`` line (the CLI exits 2). Outputs
are never torn: the commands write through the one atomic writer, :mod:`agentmill.core.records`
(``write_text_atomic``, ``write_jsonl_atomic``, ``atomic_target``), so a crash or a Ctrl-C leaves either the
previous file or the complete new one, and bad input leaves nothing at all.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ROLLOUT_FIELDS = ("group_id", "traj_id", "success", "end", "steps")
"""Trajectory fields every ``agentmill.rollout/1`` line needs to become StepTable rows (``core.types``)."""
STEP_FIELDS = ("t", "obs", "action", "reward")
"""Fields every step of a rollout line needs."""


def existing_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a Path if it is a readable regular file; else a one-line ``ValueError`` naming ``what``."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{what}: no such file: {p}")
    if not p.is_file():
        raise ValueError(f"{what}: not a regular file: {p}")
    return p


def output_path(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a Path whose folder exists (or can be created); refuses an existing directory."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{what}: {p} is a directory, not a file")
    return p


def read_rollouts(path: str | os.PathLike[str], what: str = "--in") -> tuple[Any, Any, list[dict[str, Any]]]:
    """Read an ``agentmill.rollout/1`` JSONL file: (StepTable, LabelTable or None, the raw records).

    Every structural problem — not JSON, another schema, a missing field, a table the validator refuses (empty,
    non-contiguous ``t``, NaN rewards, ...) — becomes one ``ValueError`` naming the file.
    """
    from agentmill.core.types import StepTable

    p = existing_file(path, what)
    records: list[dict[str, Any]] = []
    with open(p, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{p}:{n}: expected a JSON object per line")
            missing = [k for k in ROLLOUT_FIELDS if k not in rec]
            if rec.get("schema") == "agentmill.rollout/1" and missing:
                raise ValueError(f"{p}:{n}: the rollout record lacks {missing} (schema agentmill.rollout/1)")
            if rec.get("end") not in (None, "terminated", "truncated"):
                raise ValueError(f"{p}:{n}: end must be 'terminated' or 'truncated', got {rec['end']!r}")
            steps = rec.get("steps")
            if not isinstance(steps, list) or any(not isinstance(s, dict) or [k for k in STEP_FIELDS if k not in s]
                                                   for s in steps):
                raise ValueError(f"{p}:{n}: steps must be a list of objects with {list(STEP_FIELDS)}")
            records.append(rec)
    if not records:
        raise ValueError(f"{p}: no rollouts (empty file)")
    try:
        table, labels = StepTable.from_records(records)
    except KeyError as exc:
        raise ValueError(f"{p}: a rollout record lacks the field {exc.args[0]!r} (schema agentmill.rollout/1)"
                         ) from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{p}: {exc}") from None
    return table, labels, records
