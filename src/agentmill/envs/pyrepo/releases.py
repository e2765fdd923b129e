"""Real fixes mined from adjacent releases: keep a version pair only when the newer release's tests catch the older
release's code.

For releases (v, v+1) of one package: the source diff (test directories excluded; a hunk whose only change is a
``__version__`` line ignored) must have ≤ 3 hunks and ≤ 40 changed lines; v+1's changelog section needs a line
matching ``fix|bug|correct|regression|crash|wrong``; v+1's tests run (sandboxed) against v's source, and
FAIL_TO_PASS = tests that pass at v+1 and fail there, except collection errors and failures by ``ImportError`` or
``AttributeError`` (a new name: a feature, not a fix). A pair with |FAIL_TO_PASS| ≥ 1 becomes a :class:`RepoTask`
over v+1 (the fixed tree) whose ``bug_files`` are v's versions of the changed files; the issue text is the
changelog's fix lines. Every rejected pair keeps its reason (release diffs bundle refactors and features, so most
pairs are rejected).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from agentmill.envs.pyrepo.corpus import PyRepo
from agentmill.envs.pyrepo.mutate import RepoTask, bug_commit, unified_diff

FIX_RE = re.compile(r"fix|bug|correct|regression|crash|wrong", re.I)
VERSION_RE = re.compile(r"^\s*__version__\s*=")
MAX_HUNKS = 3
MAX_CHANGED_LINES = 40


@dataclass(frozen=True)
class PairResult:
    old: str
    new: str
    kept: bool
    reason: str
    task: RepoTask | None = None
    hunks: int = 0
    changed_lines: int = 0


def changelog_fix_lines(text: str, version: str) -> list[str]:
    """The lines of ``version``'s changelog section that mention a fix (section = from a heading naming the version
    to the next heading naming another version)."""
    lines = text.splitlines()
    head = re.compile(rf"^\s*(?:#+\s*)?v?{re.escape(version)}\b")
    other = re.compile(r"^\s*(?:#+\s*)?v?\d+\.\d+(?:\.\d+)?\b")
    out, inside = [], False
    for ln in lines:
        if head.match(ln):
            inside = True
            continue
        if inside and other.match(ln) and not head.match(ln):
            break
        if inside and FIX_RE.search(ln):
            out.append(ln.strip().lstrip("-*• ").strip())
    return out


def _hunks(old: str, new: str) -> list[list[str]]:
    """Changed-line groups of a zero-context diff, version-string-only groups dropped."""
    out, cur = [], None
    for ln in difflib.unified_diff(old.splitlines(), new.splitlines(), n=0, lineterm=""):
        if ln.startswith("@@"):
            cur = []
            out.append(cur)
        elif cur is not None and ln[:1] in "+-" and not ln.startswith(("+++", "---")):
            cur.append(ln)
    return [h for h in out if not all(VERSION_RE.match(x[1:]) for x in h)]


def source_changes(old: PyRepo, new: PyRepo) -> dict[str, tuple[str | None, str]]:
    """Source files of ``new`` whose text differs from ``old``'s beyond version strings: path -> (old text or None
    for a file ``new`` adds, new text)."""
    old_files = set(old.source_files())
    out = {}
    for p in new.source_files():
        nt = new.read(p)
        ot = old.read(p) if p in old_files else None
        if ot is None or _hunks(ot, nt):
            out[p] = (ot, nt)
    return out


def release_fix_task(old: PyRepo, new: PyRepo, changelog: str | None) -> PairResult:
    """Mine one adjacent pair (``old`` = v, ``new`` = v+1); never raises for what the tests do."""
    o, n = old.key, new.key
    if changelog is None:
        return PairResult(o, n, False, "no changelog")
    changes = source_changes(old, new)
    if not changes:
        return PairResult(o, n, False, "no source change beyond version strings")
    hunks = [h for ot, nt in changes.values() if ot is not None for h in _hunks(ot, nt)]
    n_lines = sum(len(h) for h in hunks) + sum(len(nt.splitlines()) for ot, nt in changes.values() if ot is None)
    if len(hunks) > MAX_HUNKS or n_lines > MAX_CHANGED_LINES:
        return PairResult(o, n, False, f"diff too large ({len(hunks)} hunks, {n_lines} changed lines; limits "
                                       f"{MAX_HUNKS}, {MAX_CHANGED_LINES})", hunks=len(hunks), changed_lines=n_lines)
    fixes = changelog_fix_lines(changelog, new.version)
    if not fixes:
        return PairResult(o, n, False, "no fix line in the changelog", hunks=len(hunks), changed_lines=n_lines)
    bug_files = {p: ot for p, (ot, _) in changes.items() if ot is not None}
    rep = new.run_tests(bug_files)  # v+1's tests (from the base) against v's code
    if rep.status != "ok":
        return PairResult(o, n, False, f"test run {rep.status}: {rep.detail[:200]}", hunks=len(hunks),
                          changed_lines=n_lines)
    bad_files = {e[0].split("::", 1)[0] for e in rep.collection_errors}
    f2p = [t for t in new.passing if rep.outcomes.get(t) != "passed" and t.split("::", 1)[0] not in bad_files
           and not re.search(r"\b(ImportError|AttributeError)\b", rep.reprs.get(t, ""))]
    if not f2p:
        return PairResult(o, n, False, "no FAIL_TO_PASS test", hunks=len(hunks), changed_lines=n_lines)
    iid = f"{new.name}-{old.version}-to-{new.version}"
    p2p = [t for t in new.passing if rep.outcomes.get(t) == "passed"]
    gold = "".join(unified_diff(p, ot, nt) for p, (ot, nt) in sorted(changes.items()) if ot is not None)
    issue = f"Changes requested for {new.name} (from the {new.version} changelog):\n" + \
        "\n".join(f"- {x}" for x in fixes) + "\n"
    task = RepoTask(iid, new.key, "release", new.commit, bug_commit(new, bug_files, iid), bug_files, gold, f2p, p2p,
                    issue, issue, [])
    return PairResult(o, n, True, "kept", task, len(hunks), n_lines)
