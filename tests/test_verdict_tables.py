"""The published verdict tables are what ``agentmill report --markdown`` renders from the committed ``results/``.

README.md's block between the verdict markers and docs/verdicts.md are generated from the result summaries under
``results/quick`` and ``results/full`` and the registered claims; nobody edits them by hand. This test fails when
either file differs from that render: a summary committed without re-rendering, a claim reworded or re-thresholded
in code, or a hand edit of a verdict. The fix is always ``agentmill report --markdown`` (then review the diff).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from agentmill.experiments import registry, unavailable
from agentmill.report.markdown import BEGIN, END, render_tables, splice

ROOT = Path(__file__).resolve().parents[1]


def _diff(committed: str, rendered: str, name: str) -> str:
    lines = difflib.unified_diff(committed.splitlines(), rendered.splitlines(), f"{name} (committed)",
                                 f"{name} (rendered)", lineterm="", n=1)
    return "\n".join(list(lines)[:40])


def test_readme_and_verdicts_doc_are_the_render_of_the_committed_results() -> None:
    assert not unavailable(), f"every paper must be defined to render its tables; missing extras: {unavailable()}"
    tables = render_tables(registry(), ROOT / "results")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1
    rendered = splice(readme, tables.readme_block)
    hint = "\nrun `agentmill report --markdown` and commit README.md and docs/verdicts.md"
    assert readme == rendered, _diff(readme, rendered, "README.md") + hint
    doc = (ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8")
    assert doc == tables.verdicts_doc, _diff(doc, tables.verdicts_doc, "docs/verdicts.md") + hint


def test_every_registered_claim_has_a_row_in_the_verdicts_doc() -> None:
    """The render lists claims from the code, not only those with a committed result: a claim nobody ran still shows
    as "no committed record" rather than vanishing."""
    doc = (ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8")
    rows = {line.split("**")[1] for line in doc.splitlines() if line.startswith("| **")}
    claims = {c.id for exp in registry().values() for c in exp.claims}
    assert claims <= rows, sorted(claims - rows)[:10]
