"""The corpus: pure-Python PyPI packages whose sdists ship their tests, as git repositories with a passing baseline.

``fetch(name, version)`` runs ``pip download --no-deps --no-binary :all: name==version`` (pip is the registry's
ordinary client; the only network use of pyrepo), checks the sdist's sha256 against :data:`PACKAGES`, stores it
content-addressed under ``core.paths.cache_root()/"pyrepo"/"sdists"/<sha256>.tar.gz``, extracts it (tar ``data``
filter: no absolute paths, no links out), ``git init``s it, commits the tree as ``base`` with a fixed author and
date (so the commit id is a function of the content), and runs the suite twice in the oracle's sandbox: tests
passing both times are selected, every other one is deselected and listed. ``open_repo`` never fetches: a missing
entry raises ``FileNotFoundError`` naming the fetch command. The cache is never modified in place: every run works
on a fresh copy, and bug instances are extra git commits (objects only, no working-tree change).

Measured package facts (sha256 prefixes and suite sizes) are in docs/methods/sherloc.md, "pyrepo".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentmill.core.paths import cache_root
from agentmill.core.records import write_json_atomic
from agentmill.envs.pyrepo.oracle import SandboxLimits, TestReport, run_pytest


@dataclass(frozen=True)
class Package:
    """A pinned sdist and where its code and tests live inside it."""

    name: str
    version: str
    sha256: str
    src: tuple[str, ...]
    """Source directories (relative to the sdist root) whose ``.py`` files may be mutated or patched."""
    tests: tuple[str, ...]
    """Test directories (pytest targets)."""
    pythonpath: tuple[str, ...] = (".",)
    """Put first on ``sys.path`` (``src`` for a src layout): tests run from source, no installation."""


# sha256 of the sdists as downloaded on 2026-11-29 with pip download --no-deps --no-binary :all: [M]
PACKAGES: dict[str, Package] = {p.name + "==" + p.version: p for p in (
    Package("cachetools", "8.0.1", "deb1d376d4d28c2f33f3e3058043b005e0af75c35c094bd54053e27d2906ad95",
            ("src/cachetools",), ("tests",), ("src",)),
    Package("cachetools", "8.0.0", "5ed01bd676800d51f0025605e4fd8ad0891550513e7b0a4c3da478463764e5c3",
            ("src/cachetools",), ("tests",), ("src",)),  # the release before 8.0.1: release-diff mining only
    Package("toolz", "1.2.0", "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
            ("toolz",), ("toolz/tests",)),
    Package("boltons", "26.2.0", "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
            ("boltons",), ("tests",)),
)}
DEFAULT_PACKAGES = ("cachetools==8.0.1", "toolz==1.2.0", "boltons==26.2.0")
GIT_ENV = {"GIT_AUTHOR_NAME": "agentmill", "GIT_AUTHOR_EMAIL": "pyrepo@localhost", "GIT_COMMITTER_NAME": "agentmill",
           "GIT_COMMITTER_EMAIL": "pyrepo@localhost", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000"}


def pyrepo_cache(cache: str | os.PathLike[str] | None = None) -> Path:
    return Path(cache) if cache is not None else cache_root() / "pyrepo"


def git(root: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> str:
    e = {**os.environ, **GIT_ENV, **(env or {})}
    p = subprocess.run(["git", "-C", str(root), *args], input=input, capture_output=True, env=e)
    if p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed in {root}: {p.stderr.decode(errors='replace')[-400:]}")
    return p.stdout.decode(errors="replace").strip()


@dataclass
class PyRepo:
    """A prepared repository: a git work tree at ``root`` committed as ``commit`` (the base), plus its baseline."""

    name: str
    version: str
    sha256: str
    root: Path
    src: tuple[str, ...]
    tests: tuple[str, ...]
    pythonpath: tuple[str, ...]
    commit: str = ""
    passing: tuple[str, ...] = ()
    """Test ids that passed in both baseline runs (the selected suite)."""
    deselected: tuple[str, ...] = ()
    """Tests that failed or were flaky at base: left out of every later run, listed here."""
    suite_wall_s: float = 0.0
    files_by_test: dict[str, list[str]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.name}=={self.version}"

    def source_files(self) -> list[str]:
        """Mutable/patchable source files: ``.py`` under ``src`` but not inside a test directory."""
        out = []
        for d in self.src:
            for p in sorted((self.root / d).rglob("*.py")):
                rel = p.relative_to(self.root).as_posix()
                if any(rel == t or rel.startswith(t.rstrip("/") + "/") for t in self.tests):
                    continue
                if p.name.startswith("test_") or "/tests/" in rel:
                    continue
                out.append(rel)
        return out

    def test_files(self) -> list[str]:
        return sorted({i.split("::", 1)[0] for i in self.passing})

    def read(self, rel: str) -> str:
        return (self.root / rel).read_text(encoding="utf-8")

    def run_tests(self, changes: Mapping[str, str | None] | None = None, targets: Sequence[str] | None = None, *,
                  limits: SandboxLimits | None = None) -> TestReport:
        """The sandboxed suite (or ``targets``) on a copy of the base with ``changes``; base failures deselected."""
        lim = limits or SandboxLimits(wall_s=max(30.0, 3 * self.suite_wall_s + 30.0))
        return run_pytest(self.root, changes=changes, targets=list(targets or self.tests),
                          deselect=self.deselected, pythonpath=self.pythonpath, limits=lim)

    def to_meta(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "src": list(self.src),
                "tests": list(self.tests), "pythonpath": list(self.pythonpath), "commit": self.commit,
                "passing": list(self.passing), "deselected": list(self.deselected),
                "suite_wall_s": self.suite_wall_s}


def _meta_path(root: Path) -> Path:
    return root.parent / (root.name + ".baseline.json")


def _load(root: Path) -> PyRepo:
    m = json.loads(_meta_path(root).read_text())
    return PyRepo(m["name"], m["version"], m["sha256"], root, tuple(m["src"]), tuple(m["tests"]),
                  tuple(m["pythonpath"]), m["commit"], tuple(m["passing"]), tuple(m["deselected"]),
                  float(m["suite_wall_s"]))


def git_init(root: Path) -> str:
    """``git init`` + commit everything as the base with a fixed identity and date; returns the commit id."""
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-gpg-sign", "-m", "base")
    return git(root, "rev-parse", "HEAD")


def baseline(repo: PyRepo, runs: int = 2) -> PyRepo:
    """Run the suite ``runs`` times; keep the tests passing every time, deselect and list the rest."""
    reports = [run_pytest(repo.root, targets=list(repo.tests), pythonpath=repo.pythonpath,
                          limits=SandboxLimits(wall_s=600)) for _ in range(runs)]
    for r in reports:
        if r.status != "ok":
            raise RuntimeError(f"{repo.key}: the base suite did not run ({r.status}: {r.detail})")
    ids = set(reports[0].outcomes)
    for r in reports[1:]:
        ids |= set(r.outcomes)
    passing = sorted(i for i in ids if all(r.outcomes.get(i) == "passed" for r in reports))
    bad = sorted(i for i in ids if i not in passing and not all(r.outcomes.get(i) == "skipped" for r in reports))
    if not passing:
        raise RuntimeError(f"{repo.key}: no test passes at base; the package is unusable")
    repo.passing, repo.deselected = tuple(passing), tuple(bad)
    repo.suite_wall_s = max(r.wall_s for r in reports)
    write_json_atomic(_meta_path(repo.root), repo.to_meta())
    return repo


def _extract(sdist: Path, dest: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pyrepo-x-", dir=dest.parent))
    try:
        with tarfile.open(sdist) as tf:
            tf.extractall(tmp, filter="data")
        tops = list(tmp.iterdir())
        top = tops[0] if len(tops) == 1 and tops[0].is_dir() else tmp
        os.replace(top, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch(spec: str, *, cache: str | os.PathLike[str] | None = None, run_baseline: bool = True) -> PyRepo:
    """Download (once), verify, extract, commit and baseline ``name==version``; returns the prepared repo."""
    pkg = PACKAGES.get(spec)
    if pkg is None:
        raise ValueError(f"unknown pyrepo package {spec!r}; pinned: {', '.join(PACKAGES)}")
    c = pyrepo_cache(cache)
    (c / "sdists").mkdir(parents=True, exist_ok=True)
    (c / "repos").mkdir(parents=True, exist_ok=True)
    sdist = c / "sdists" / f"{pkg.sha256}.tar.gz"
    if not sdist.exists():
        with tempfile.TemporaryDirectory(prefix="pyrepo-dl-") as d:
            p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                                "--no-build-isolation", "-q", "-d", d, spec], capture_output=True, text=True)
            if p.returncode != 0:  # sdist metadata needs a build backend; retry with pip's isolated build
                p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                                    "-q", "-d", d, spec], capture_output=True, text=True)
            files = list(Path(d).glob("*.tar.gz"))
            if p.returncode != 0 or len(files) != 1:
                raise RuntimeError(f"pip download {spec} failed: {p.stderr[-500:]}")
            digest = hashlib.sha256(files[0].read_bytes()).hexdigest()
            if digest != pkg.sha256:
                raise RuntimeError(f"{spec}: sdist sha256 {digest} differs from the pinned {pkg.sha256}")
            shutil.copyfile(files[0], sdist.with_suffix(".part"))
            os.replace(sdist.with_suffix(".part"), sdist)
    root = c / "repos" / pkg.sha256
    if not (root / ".git").exists():
        if root.exists():
            shutil.rmtree(root)
        _extract(sdist, root)
        for t in pkg.tests:
            if not (root / t).is_dir():
                raise RuntimeError(f"{spec}: the sdist ships no tests at {t}")
        git_init(root)
    if _meta_path(root).exists():
        return _load(root)
    repo = PyRepo(pkg.name, pkg.version, pkg.sha256, root, pkg.src, pkg.tests, pkg.pythonpath,
                  git(root, "rev-parse", "HEAD"))
    return baseline(repo) if run_baseline else repo


def open_repo(spec: str, *, cache: str | os.PathLike[str] | None = None) -> PyRepo:
    """The prepared repository for ``name==version`` from the cache; never fetches."""
    pkg = PACKAGES.get(spec)
    if pkg is None:
        raise ValueError(f"unknown pyrepo package {spec!r}; pinned: {', '.join(PACKAGES)}")
    root = pyrepo_cache(cache) / "repos" / pkg.sha256
    if not _meta_path(root).exists():
        raise FileNotFoundError(f"{spec} is not in the pyrepo cache ({root}); run: agentmill envs pyrepo fetch "
                                f"--packages {spec}")
    return _load(root)


def cached(spec: str, *, cache: str | os.PathLike[str] | None = None) -> bool:
    pkg = PACKAGES.get(spec)
    return pkg is not None and _meta_path(pyrepo_cache(cache) / "repos" / pkg.sha256).exists()


# ------------------------------------------------------------------------------------------------ fixture package
FIXTURE_FILES: dict[str, str] = {
    "minicalc/__init__.py": '"""A tiny package for pyrepo and sherloc tests."""\nfrom .ops import clamp, mean, span\n'
                            'from .text import shout, words\n',
    "minicalc/ops.py": '''"""Arithmetic helpers."""


def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    """Arithmetic mean of a non-empty list."""
    if len(xs) == 0:
        raise ValueError("empty")
    return sum(xs) / len(xs)


def span(xs):
    """max - min."""
    return max(xs) - min(xs)


def is_small(x):
    return x >= 0 and x < 10
''',
    "minicalc/text.py": '''"""String helpers."""
from .ops import clamp


def shout(s, times=1):
    return (s.upper() + "!") * clamp(times, 1, 3)


def words(s):
    return [w for w in s.split(" ") if w != ""]
''',
    "tests/test_ops.py": '''from minicalc.ops import clamp, is_small, mean, span


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10
    assert clamp(10, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_span():
    assert span([1, 5, 3]) == 4


def test_small():
    assert is_small(3) is True
    assert is_small(10) is False
    assert is_small(-1) is False


def test_unrelated_1():
    assert 1 + 1 == 2


def test_unrelated_2():
    assert "a" * 2 == "aa"
''',
    "tests/test_text.py": '''from minicalc.text import shout, words


def test_shout():
    assert shout("hi") == "HI!"
    assert shout("a", 5) == "A!A!A!"


def test_words():
    assert words("a  b c") == ["a", "b", "c"]


def test_more_1():
    assert words("") == []


def test_more_2():
    assert shout("x", 0) == "X!"
''',
}


def fixture_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    """Where the fixture package lives in the pyrepo cache (keyed by its content, so an edit makes a new one)."""
    digest = hashlib.sha256(json.dumps(FIXTURE_FILES, sort_keys=True).encode()).hexdigest()
    return pyrepo_cache(cache) / "fixture" / digest[:16]


def fixture_repo(dest: str | os.PathLike[str], *, run_baseline: bool = True,
                 files: Mapping[str, str] | None = None) -> PyRepo:
    """The in-code fixture package (``minicalc``, 14 tests) as a prepared repo at ``dest`` (tests and smoke
    profiles use it; nothing is fetched)."""
    root = Path(dest)
    content = dict(files or FIXTURE_FILES)
    if _meta_path(root).exists() and (root / ".git").exists():
        return _load(root)
    if root.exists():  # a half-built fixture (interrupted): start again
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for rel, text in content.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    repo = PyRepo("minicalc", "0.0", "fixture-" + digest[:16], root, ("minicalc",), ("tests",), (".",),
                  git_init(root))
    return baseline(repo) if run_baseline else repo
