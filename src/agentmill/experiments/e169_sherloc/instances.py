"""Bug instances for the SHERLOC experiments: the in-code fixture package (smoke) or seeded bugs of cached pyrepo
packages (quick, full). Never fetches: a package missing from the cache raises ``FileNotFoundError`` naming
``agentmill envs pyrepo fetch``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIXTURE = "fixture"


def load(corpus: str, n_per_package: int, seed: int, work_dir: Path, progress: Any = None) -> list[tuple[Any, Any]]:
    """[(PyRepo, RepoTask)]: ``corpus`` is ``fixture`` or comma-separated ``name==version`` specs; up to
    ``n_per_package`` seeded instances each (mined once, then read from the mining log)."""
    from agentmill.envs.pyrepo import fixture_dir, fixture_repo, open_repo, seed_bugs

    out: list[tuple[Any, Any]] = []
    if corpus == FIXTURE:  # content-addressed in the pyrepo cache: built and mined once (seconds), then reused
        repo = fixture_repo(fixture_dir())
        return [(repo, t) for t in seed_bugs(repo, n_per_package, seed=seed)]
    for spec in [s.strip() for s in corpus.split(",") if s.strip()]:
        repo = open_repo(spec)
        tasks = seed_bugs(repo, n_per_package, seed=seed,
                          progress=(lambda d, n, s=spec: progress(f"mining {s}", d, n)) if progress else None)
        out += [(repo, t) for t in tasks]
    return out


def snapshot_of(repo: Any, task: Any) -> Any:
    from agentmill.methods.sherloc import RepoSnapshot

    return RepoSnapshot.from_git(repo.root, task.bug_commit)


def single_file(task: Any) -> bool:
    return len(task.bug_files) == 1
