"""docs/methods/<package>.md: one page per landed method that a newcomer can read and run.

Each page exists for every package under ``agentmill.methods``, cites nothing outside the repository, carries its
paper's claims table as ``agentmill report --markdown`` renders it from ``results/``, and its ``python`` code blocks,
run in order in one fresh interpreter, work offline on the CPU.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentmill.experiments import registry
from agentmill.report.markdown import method_docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "methods"
PACKAGES = sorted(p.name for p in (ROOT / "src" / "agentmill" / "methods").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())
COMPOSITIONS = sorted(p.name for p in (ROOT / "src" / "agentmill" / "experiments").glob("compose_*")
                      if (p / "__init__.py").exists())
PAGES = PACKAGES + (["compositions"] if COMPOSITIONS else [])
"""One page per method package, and one page, ``compositions.md``, for every composition together."""


def _code(text: str) -> str:
    return "\n".join(m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M))


def test_every_method_package_has_a_page() -> None:
    assert PACKAGES and sorted(p.stem for p in DOCS.glob("*.md")) == sorted(PAGES)


def test_the_compositions_page_has_a_claims_table_per_composition() -> None:
    if not COMPOSITIONS:
        pytest.skip("no composition package exists")
    text = (DOCS / "compositions.md").read_text(encoding="utf-8")
    for name in COMPOSITIONS:
        label = "C-" + name.removeprefix("compose_").replace("_", "-")
        assert f"<!-- claims:{label} -->" in text, name


@pytest.mark.parametrize("package", PAGES)
def test_page_cites_only_the_repository_and_has_its_claims_table(package: str) -> None:
    text = (DOCS / f"{package}.md").read_text(encoding="utf-8")
    assert "spec §" not in text and "shared/specs" not in text
    assert re.search(r"<!-- claims:(E\d+|C-[a-z0-9-]+) -->", text) and "<!-- /claims -->" in text
    assert _code(text).strip(), "a page needs a runnable python example"


def test_claims_tables_are_the_render_of_the_committed_results() -> None:
    wanted = method_docs(registry(), ROOT / "results", DOCS, ROOT / "docs" / "verdicts.md")
    assert set(wanted) == {DOCS / f"{p}.md" for p in PAGES}
    for path, text in wanted.items():
        have = path.read_text(encoding="utf-8")
        diff = "\n".join(list(difflib.unified_diff(have.splitlines(), text.splitlines(), lineterm="", n=1))[:30])
        assert have == text, f"{path.name}: run `agentmill report --markdown`\n{diff}"


@pytest.mark.slow
@pytest.mark.parametrize("package", PAGES)
def test_the_pages_example_runs(package: str, tmp_path: Path) -> None:
    code = _code((DOCS / f"{package}.md").read_text(encoding="utf-8"))
    # 300 s: a hang guard, not a speed check (the compositions page took 120 s on a loaded 2-core host)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1",
                               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "AGENTMILL_THREAD_CAP": "1",
                               "AGENTMILL_CACHE": str(tmp_path / "cache"), "AGENTMILL_ARTIFACTS": str(tmp_path / "a")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the example should print what it shows"
