"""pyrepo: real Python repositories from PyPI sdists with seeded bugs and a sandboxed pytest oracle (LM-free).

Public API (documented for users and for the methods that build on it in docs/methods/sherloc.md, "pyrepo"):

- corpus: :data:`PACKAGES`, :func:`fetch` (the only network use: ``pip download``), :func:`open_repo` (cache
  only), :func:`cached`, :func:`fixture_repo` and :func:`fixture_dir` (the in-code fixture package for tests and smoke),
  :class:`PyRepo`;
- bugs: :func:`seed_bugs` -> :class:`RepoTask` (FAIL_TO_PASS / PASS_TO_PASS, gold patch, issue texts, a git
  commit of the buggy tree), :func:`mutations`, :class:`Mutation`;
- oracle: :func:`run_pytest`, :class:`TestReport`, :class:`SandboxLimits`, :func:`layers`;
- candidates: :func:`make_candidates`, :func:`verify`, :class:`Candidate`, :class:`PoolGenerator`;
- critics: :class:`SyntaxCritic`, :class:`LintCritic`, :class:`TestSubsetCritic`, :class:`TargetedTestCritic`,
  :class:`ScoreCritic`, :class:`OracleCritic`, :func:`default_critics`, :class:`CriticOutcome`;
- real fixes: :func:`release_fix_task` (adjacent releases, FAIL_TO_PASS-checked), :class:`PairResult`;
- workspace: :class:`RepairWorkspace`.
"""

from agentmill.envs.pyrepo.candidates import Candidate, PoolGenerator, make_candidates, verify
from agentmill.envs.pyrepo.corpus import (DEFAULT_PACKAGES, PACKAGES, Package, PyRepo, cached, fetch, fixture_dir,
                                          fixture_repo,
                                          open_repo)
from agentmill.envs.pyrepo.critics import (CriticOutcome, LintCritic, OracleCritic, ScoreCritic, SyntaxCritic,
                                           TargetedTestCritic, TestSubsetCritic, default_critics)
from agentmill.envs.pyrepo.mutate import Mutation, RepoTask, mutations, seed_bugs, unified_diff
from agentmill.envs.pyrepo.oracle import SandboxLimits, TestReport, layers, run_pytest
from agentmill.envs.pyrepo.releases import PairResult, changelog_fix_lines, release_fix_task
from agentmill.envs.pyrepo.workspace import RepairWorkspace, SubmitResult

__all__ = ["cached", "Candidate", "changelog_fix_lines", "CriticOutcome", "default_critics", "DEFAULT_PACKAGES",
           "fetch", "fixture_dir", "fixture_repo", "layers", "LintCritic", "make_candidates", "Mutation", "mutations",
           "open_repo", "OracleCritic", "Package", "PACKAGES", "PairResult", "PoolGenerator", "PyRepo",
           "release_fix_task", "RepairWorkspace", "RepoTask", "run_pytest", "SandboxLimits", "ScoreCritic",
           "seed_bugs", "SubmitResult", "SyntaxCritic", "TargetedTestCritic", "TestReport", "TestSubsetCritic",
           "unified_diff", "verify"]
