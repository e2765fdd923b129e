"""Release-diff mining on two synthetic versions of the fixture package."""

from __future__ import annotations

import pytest

from agentmill.envs.pyrepo import fixture_repo
from agentmill.envs.pyrepo.corpus import FIXTURE_FILES
from agentmill.envs.pyrepo.releases import changelog_fix_lines, release_fix_task

CHANGELOG = """v0.2 (2026-01-02)
=================

- Fix words() dropping nothing on empty input.
- New docs.

v0.1
====

- Fix an old crash.
"""


def test_changelog_section_lines() -> None:
    assert changelog_fix_lines(CHANGELOG, "0.2") == ["Fix words() dropping nothing on empty input."]
    assert changelog_fix_lines(CHANGELOG, "0.1") == ["Fix an old crash."]
    assert changelog_fix_lines(CHANGELOG, "0.3") == []


@pytest.mark.slow  # two fixture baselines and one mining run in the sandbox
def test_pair_kept_and_rejected(tmp_path) -> None:
    good = FIXTURE_FILES["minicalc/text.py"]
    buggy = good.replace('if w != ""', 'if w != "" or True')
    old = fixture_repo(tmp_path / "v1", files={**FIXTURE_FILES, "minicalc/text.py": buggy})
    old.version = "0.1"
    new = fixture_repo(tmp_path / "v2")
    new.version = "0.2"
    r = release_fix_task(old, new, CHANGELOG)
    assert r.kept, r.reason
    t = r.task
    assert t.fail_to_pass == ["tests/test_text.py::test_more_1", "tests/test_text.py::test_words"]
    assert t.bug_files == {"minicalc/text.py": buggy}
    assert "-    return [w for w in s.split(\" \") if w != \"\" or True]" in t.gold_patch
    assert t.issue.endswith("- Fix words() dropping nothing on empty input.\n")
    assert release_fix_task(old, new, CHANGELOG.replace("Fix", "Change")).reason == "no fix line in the changelog"
    assert release_fix_task(old, new, None).reason == "no changelog"
    assert release_fix_task(new, new, CHANGELOG).reason.startswith("no source change")
