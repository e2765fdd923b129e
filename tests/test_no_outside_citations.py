"""No comment, docstring or user-visible string in ``src/`` or ``tests/``, and no hand-written doc, cites a document
outside the repository.

The design specs live outside the repository, so a citation of one of their sections resolves for nobody who clones
it. Citations point at the paper (arXiv id and section, with a source tag) or at the project's own pages
(``docs/methods/<slug>.md``, a method README's deviation number, ``docs/papers.md``, ``docs/LOG.md`` with a date).
The hand-written docs in ``DOCS`` are held to the same rule; ``docs/LOG.md`` is dated history and is not scanned.

``ALLOWED`` lists the paths still being rewritten by their owners; remove an entry once its files are clean (the
test fails on an entry that no longer matches any hit, so the list cannot go stale).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PATTERNS = ("spec §", "spec§", "shared/specs")
"""Text that cites an outside design spec."""

DOCS = ("docs/papers.md", "docs/methods/*.md", "src/agentmill/methods/*/README.md")
"""Hand-written markdown scanned besides the ``*.py`` files of ``src/`` and ``tests/`` (globs relative to the root)."""

ALLOWED: tuple[str, ...] = ()
"""Out-of-scope paths (files, or folders ending in ``/``) whose citations are being rewritten by other changes."""

_QUOTED = re.compile(r"([\"'])(?:" + "|".join(map(re.escape, PATTERNS)) + r")\1")
"""A pattern standing alone in quotes is the pattern itself (as in this file or a checker's list), not a citation."""


def _files() -> list[Path]:
    """The ``*.py`` files of ``src/`` and ``tests/``, then the docs that ``DOCS`` matches."""
    py = [path for top in ("src", "tests") for path in sorted((ROOT / top).rglob("*.py"))]
    return py + [path for pattern in DOCS for path in sorted(ROOT.glob(pattern))]


def _hits() -> list[tuple[str, int, str]]:
    """(relative path, line number, line) of every citation in the scanned files."""
    out = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p in _QUOTED.sub("", line) for p in PATTERNS):
                out.append((rel, i, line.strip()))
    return out


def _allowed(rel: str) -> bool:
    return any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED)


def test_no_citation_of_an_outside_spec() -> None:
    bad = [f"{rel}:{i}: {line[:120]}" for rel, i, line in _hits() if not _allowed(rel)]
    assert not bad, ("cite the paper or the project's own docs instead of an outside spec:\n" + "\n".join(bad))


def test_allow_list_entries_still_have_hits() -> None:
    hit_paths = {rel for rel, _, _ in _hits()}
    stale = [a for a in ALLOWED if not any(rel == a or (a.endswith("/") and rel.startswith(a)) for rel in hit_paths)]
    assert not stale, f"these allow-list entries are clean now; remove them from ALLOWED: {stale}"


def test_every_doc_pattern_matches_a_file() -> None:
    """A moved or renamed doc must not drop out of the scan unnoticed."""
    empty = [pattern for pattern in DOCS if not list(ROOT.glob(pattern))]
    assert not empty, f"these DOCS patterns match no file; fix or remove them: {empty}"


def test_the_checker_finds_a_citation() -> None:
    """Positive control: a planted citation is found, and the quoted pattern alone is not."""
    planted = "# threshold from " + "spec" + " §7"
    assert any(p in _QUOTED.sub("", planted) for p in PATTERNS)
    assert not any(p in _QUOTED.sub("", 'FORBIDDEN = ("' + "spec" + ' §", "x")') for p in PATTERNS)
