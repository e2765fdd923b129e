"""LM-free critics with measured costs, and the oracle as a critic.

Every critic answers ``check(task, candidate) -> CriticOutcome(passed, wall_s, cpu_s, detail)``; costs are the
wall and CPU seconds of that very call (measure serially: they depend on load).

- ``L0_syntax`` (:class:`SyntaxCritic`): ``compile()`` of the changed files. On mutation pools its gap is ≈ 0 by
  construction (every mutant compiles) — a property of the pool, not a finding.
- ``L1_lint`` (:class:`LintCritic`): pyflakes on the changed files (undefined names, unused imports…); passes iff
  the candidate adds no pyflakes message over the buggy tree's.
- ``L2_public`` (:class:`TestSubsetCritic`): a fixed seeded 25 % subset of the test files (imperfect).
- ``L2_targeted`` (:class:`TargetedTestCritic`): the test files named after the changed module (often near-oracle
  on seeded bugs).
- :class:`ScoreCritic`: any scorer ``score_fn(task, candidate) -> float`` (an LM reviewer lives in a method and is
  passed in); passes iff the score exceeds ``threshold``.
- :class:`OracleCritic`: the full selected suite (the verifier).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.seeding import rng_for
from agentmill.envs.pyrepo.candidates import Candidate, oracle_report
from agentmill.envs.pyrepo.corpus import PyRepo
from agentmill.envs.pyrepo.mutate import RepoTask, screen_targets


@dataclass(frozen=True)
class CriticOutcome:
    name: str
    passed: bool
    wall_s: float
    cpu_s: float
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "wall_s": self.wall_s, "cpu_s": self.cpu_s,
                "detail": self.detail}


def _timed(name: str, fn: Callable[[], tuple[bool, dict[str, Any]]]) -> CriticOutcome:
    t0, c0 = time.perf_counter(), time.process_time()
    ok, detail = fn()
    return CriticOutcome(name, bool(ok), time.perf_counter() - t0, time.process_time() - c0, detail)


class SyntaxCritic:
    name = "L0_syntax"

    def check(self, task: RepoTask, cand: Candidate) -> CriticOutcome:
        def run() -> tuple[bool, dict[str, Any]]:
            for p, text in cand.files.items():
                try:
                    compile(text, p, "exec")
                except (SyntaxError, ValueError) as e:
                    return False, {"file": p, "error": str(e)[:200]}
            return True, {}
        return _timed(self.name, run)


def pyflakes_messages(path: str, text: str) -> list[str]:
    """pyflakes messages for one file without line numbers (so a shifted line does not count as new)."""
    try:
        from pyflakes import api, reporter
    except ImportError:
        raise RuntimeError("L1_lint needs pyflakes: pip install 'agentmill[coding]'") from None
    import io

    out, err = io.StringIO(), io.StringIO()
    api.check(text, path, reporter.Reporter(out, err))
    msgs = []
    for ln in (out.getvalue() + err.getvalue()).splitlines():
        parts = ln.split(":", 3)
        msgs.append(parts[-1].strip() if len(parts) >= 3 else ln)
    return sorted(msgs)


class LintCritic:
    name = "L1_lint"

    def check(self, task: RepoTask, cand: Candidate) -> CriticOutcome:
        def run() -> tuple[bool, dict[str, Any]]:
            new: list[str] = []
            for p, text in cand.files.items():
                before = pyflakes_messages(p, task.bug_files.get(p, text))
                after = pyflakes_messages(p, text)
                for m in before:
                    if m in after:
                        after.remove(m)
                new += [f"{p}: {m}" for m in after]
            return not new, {"new_messages": new[:10]}
        return _timed(self.name, run)


class _TestsCritic:
    name = ""

    def __init__(self, repo: PyRepo) -> None:
        self.repo = repo

    def targets(self, task: RepoTask, cand: Candidate) -> list[str]:
        raise NotImplementedError

    def check(self, task: RepoTask, cand: Candidate) -> CriticOutcome:
        def run() -> tuple[bool, dict[str, Any]]:
            targets = self.targets(task, cand)
            if not targets:
                return True, {"targets": [], "note": "no test file selected: vacuous pass"}
            safe = {p: t for p, t in cand.files.items() if p in self.repo.source_files()}
            rep = self.repo.run_tests(safe, targets)
            ids = [i for i in self.repo.passing if i.split("::", 1)[0] in targets]
            return rep.all_pass(ids), {"targets": targets, "status": rep.status, "failed": rep.failed()[:10],
                                       "child_wall_s": rep.wall_s, "child_cpu_s": rep.cpu_s}
        out = _timed(self.name, run)
        # the test run happens in a child: its CPU seconds are the child's, not this process's
        return CriticOutcome(out.name, out.passed, out.wall_s, out.cpu_s + out.detail.get("child_cpu_s", 0.0),
                             out.detail)


class TestSubsetCritic(_TestsCritic):
    """A fixed seeded share (default 25 %, at least one) of the repository's test files."""

    __test__ = False
    name = "L2_public"

    def __init__(self, repo: PyRepo, share: float = 0.25, seed: int = 0) -> None:
        super().__init__(repo)
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        files = repo.test_files()
        k = max(1, round(share * len(files)))
        idx = rng_for("pyrepo.L2_public", repo.sha256, seed).permutation(len(files))[:k]
        self.files = sorted(files[int(i)] for i in idx)

    def targets(self, task: RepoTask, cand: Candidate) -> list[str]:
        return list(self.files)


class TargetedTestCritic(_TestsCritic):
    """The test files named after each changed module."""

    __test__ = False
    name = "L2_targeted"

    def targets(self, task: RepoTask, cand: Candidate) -> list[str]:
        out: set[str] = set()
        for p in cand.files:
            out.update(screen_targets(self.repo, p))
        return sorted(out)


class OracleCritic:
    """The verifier: the full selected suite; passes iff FAIL_TO_PASS ∪ PASS_TO_PASS all pass."""

    name = "oracle"

    def __init__(self, repo: PyRepo) -> None:
        self.repo = repo

    def check(self, task: RepoTask, cand: Candidate) -> CriticOutcome:
        def run() -> tuple[bool, dict[str, Any]]:
            rep = oracle_report(task, self.repo, cand.files)
            return rep.all_pass(task.fail_to_pass + task.pass_to_pass), {"status": rep.status,
                                                                         "failed": rep.failed()[:10],
                                                                         "child_cpu_s": rep.cpu_s}
        out = _timed(self.name, run)
        return CriticOutcome(out.name, out.passed, out.wall_s, out.cpu_s + out.detail.get("child_cpu_s", 0.0),
                             out.detail)


class ScoreCritic:
    """Wraps a scorer (e.g. an LM reviewer's P(yes)); passes iff ``score_fn(task, cand) > threshold``. A scorer
    that raises makes the outcome ``unavailable`` (passed False, ``detail["unavailable"]``) rather than crash."""

    def __init__(self, name: str, score_fn: Callable[[RepoTask, Candidate], float], threshold: float = 0.5):
        self.name, self.score_fn, self.threshold = name, score_fn, threshold

    def check(self, task: RepoTask, cand: Candidate) -> CriticOutcome:
        def run() -> tuple[bool, dict[str, Any]]:
            try:
                s = float(self.score_fn(task, cand))
            except Exception as e:  # noqa: BLE001 - an unavailable scorer is recorded, not fatal
                return False, {"unavailable": f"{type(e).__name__}: {str(e)[:200]}"}
            return s > self.threshold, {"score": s}
        return _timed(self.name, run)


def default_critics(repo: PyRepo) -> dict[str, Any]:
    """The LM-free critics by name: L0_syntax, L1_lint, L2_public, L2_targeted."""
    return {"L0_syntax": SyntaxCritic(), "L1_lint": LintCritic(), "L2_public": TestSubsetCritic(repo),
            "L2_targeted": TargetedTestCritic(repo)}
