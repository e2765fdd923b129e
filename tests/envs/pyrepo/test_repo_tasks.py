"""Fixture package -> baseline -> seeded bugs -> candidates, critics, workspace (sandboxed pytest throughout).
The session fixture runs ~8 sandboxed suites (baseline twice, mining), hence ``slow``."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow

from agentmill.envs.pyrepo import (Candidate, PoolGenerator, RepairWorkspace, ScoreCritic, default_critics,
                                   make_candidates, verify)


def test_baseline_and_tasks(fixture_pyrepo) -> None:
    repo, tasks = fixture_pyrepo
    assert len(repo.passing) == 10 and repo.deselected == ()
    assert len(tasks) == 2
    for t in tasks:
        assert 1 <= len(t.fail_to_pass) <= 2  # at most 20 % of 10 tests
        assert set(t.fail_to_pass).isdisjoint(t.pass_to_pass)
        assert len(t.fail_to_pass) + len(t.pass_to_pass) == 10
        assert t.gold_patch.startswith("diff --git") and t.issue.startswith("Running the test suite")
        assert "minicalc/" not in t.issue.split("\n", 1)[1]  # style (a): no package frames
        assert len(t.bug_commit) == 40 and t.bug_commit != t.base_commit


def test_candidates_labels_and_critics(fixture_pyrepo) -> None:
    repo, tasks = fixture_pyrepo
    t = tasks[1]
    cands = {c.kind: verify(c, t, repo) for c in make_candidates(t, repo)}
    assert cands["revert"].y == 1 and cands["noop"].y == 0
    crit = default_critics(repo)
    out = {k: crit[k].check(t, cands["noop"]) for k in ("L0_syntax", "L1_lint", "L2_targeted")}
    assert out["L0_syntax"].passed and out["L1_lint"].passed and not out["L2_targeted"].passed
    assert all(o.wall_s > 0 for o in out.values())
    assert crit["L2_targeted"].check(t, cands["revert"]).passed
    flaky = ScoreCritic("L3", lambda task, cand: 1 / 0).check(t, cands["revert"])
    assert not flaky.passed and "ZeroDivisionError" in flaky.detail["unavailable"]


def test_lint_critic_sees_a_new_undefined_name(fixture_pyrepo) -> None:
    repo, tasks = fixture_pyrepo
    t = tasks[0]
    f = t.gold_files[0]
    c = Candidate(t.instance_id, "x", "custom", {f: t.bug_files[f] + "\nundefined_thing()\n"}, "")
    assert not default_critics(repo)["L1_lint"].check(t, c).passed


def test_pool_generator_follows_its_kernel() -> None:
    pool = [Candidate("t", f"g{i}", "revert", {}, "", y=1) for i in range(4000)] + \
           [Candidate("t", f"b{i}", "noop", {}, "", y=0) for i in range(4000)]
    gen = PoolGenerator(pool, b0=0.3, p_fix=0.2, p_break=0.1, seed=1)
    ys = [gen.next().y for _ in range(3000)]
    after_bad = [b for a, b in zip(ys, ys[1:]) if a == 0]
    after_good = [b for a, b in zip(ys, ys[1:]) if a == 1]
    # binomial tolerance: 4 standard errors
    assert abs(np.mean(after_bad) - 0.2) < 4 * np.sqrt(0.2 * 0.8 / len(after_bad))
    assert abs(np.mean(after_good) - 0.9) < 4 * np.sqrt(0.9 * 0.1 / len(after_good))
    with pytest.raises(ValueError, match="p_fix"):
        PoolGenerator(pool, b0=0.3, p_fix=1.5, p_break=0.1)


def test_workspace_confinement_and_submit(fixture_pyrepo) -> None:
    repo, tasks = fixture_pyrepo
    t = tasks[1]
    m = t.mutation_objects()[0]
    with RepairWorkspace(repo, t) as ws:
        for bad in ("../x.py", "/etc/passwd", "tests/test_ops.py", "setup.cfg"):
            assert not ws.edit(bad, "a", "b").ok
        assert not ws.edit(m.file, "no such text", "x").ok
        buggy_line = t.bug_files[m.file].splitlines()[m.line - 1]
        fixed_line = repo.read(m.file).splitlines()[m.line - 1]
        assert ws.edit(m.file, buggy_line, fixed_line).ok
        sub = ws.submit()
        assert sub.resolved and sub.changed_files == ()
