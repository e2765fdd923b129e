"""Reading a rollouts JSONL file (what ``agentmill probe sample --out`` writes) line by line, for the commands that
take one: ``probe label`` (``relabel``), ``probe export`` (``inspect_export``) and ``probe extract`` (``store``).

Each caller checks its own keys and raises its own error class; what they share is here: the file must exist and be
a file, blank lines are skipped, and a line that is not JSON is refused with the file and its 1-based line number.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def jsonl_lines(path: str | os.PathLike[str], error: type[Exception], *, missing: str = "no such rollouts file",
                not_file: str = "not a file", hint: str = "") -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` for every non-blank line of ``path``; raises ``error`` naming the file (and the
    line) when the file is missing, not a file, or a line is not JSON. ``hint`` is appended to the JSON error."""
    p = Path(path)
    if not p.exists():
        raise error(f"{p}: {missing}")
    if not p.is_file():
        raise error(f"{p}: {not_file}")
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield i, json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{p}: line {i} is not JSON ({e.msg}){'; ' + hint if hint else ''}") from None
