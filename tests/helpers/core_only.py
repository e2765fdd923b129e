"""Run agentmill as a core-only install would: every module that only an extra brings is made unimportable.

Building a fresh venv with ``pip install agentmill`` (no extras) needs the network and a minute; instead, the
distributions the core needs (``[project] dependencies`` and what they require, recursively) are read from the
installed metadata, and every top-level module of any other distribution an extra brings in is blocked by a
meta-path finder installed before agentmill is imported. ``import torch`` then fails exactly as it would on a
core install, with ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_BLOCKER = """
import sys
BLOCKED = frozenset({blocked!r})
class _CoreOnly:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: core-only install)", name=name)
        return None
sys.meta_path.insert(0, _CoreOnly())
"""


def _req_name(req: str) -> tuple[str, str | None]:
    """(distribution name, extra it is conditional on or None) of one ``Requires-Dist`` line."""
    name = re.split(r"[ ;<>=!~\[(]", req.strip(), maxsplit=1)[0]
    m = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", req)
    return _norm(name), (m.group(1) if m else None)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            reqs = md.requires(d) or []
        except md.PackageNotFoundError:
            continue
        todo += [n for n, extra in map(_req_name, reqs) if extra is None]
    return seen


@cache
def blocked_modules() -> frozenset[str]:
    """Top-level import names of the distributions only agentmill's extras bring in."""
    own = md.requires("agentmill") or []
    core = _closure({n for n, extra in map(_req_name, own) if extra is None})
    extras = _closure({n for n, extra in map(_req_name, own) if extra is not None and n != "agentmill"})
    # the extras that point back at agentmill (``all = agentmill[...]``) are covered by the others
    only_extras = extras - core - {"agentmill"}
    tops: set[str] = set()
    for top, dists in md.packages_distributions().items():
        if any(_norm(d) in only_extras for d in dists) and not any(_norm(d) in core for d in dists):
            tops.add(top)
    return frozenset(tops)


def run_core_only(code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (Python source) in a fresh interpreter whose extras' modules are blocked."""
    prelude = _BLOCKER.format(blocked=sorted(blocked_modules()))
    env = {**os.environ, "COLUMNS": "300"}  # rich tables unwrapped, so a test can read whole cells
    return subprocess.run([sys.executable, "-c", prelude + "\n" + code, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def run_cli_core_only(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``agentmill ARGV...`` on a simulated core-only install."""
    return run_core_only("import sys\nfrom agentmill.cli.main import main\nsys.exit(main(sys.argv[1:]))", *argv,
                         timeout=timeout)
