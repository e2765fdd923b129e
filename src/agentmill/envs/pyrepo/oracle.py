"""pytest as the oracle, run in a sandboxed child over a fresh copy of a repository tree.

How a run is contained (the boundary is the kernel's, through :mod:`agentmill.core.bubblewrap`):

- the parent copies the base tree (plain copies, never hard links: root ignores read-only bits, so a write
  through a hard link would reach the cache) to a host temp dir and writes the candidate's files over it;
- that copy is bound **read-only** at ``/repo`` inside bubblewrap (fresh user, pid, mount, network, IPC and UTS
  namespaces, uid 65534, no capabilities); the child copies it into its private, size-capped ``/tmp`` and runs
  pytest there, so a test can write nowhere but a tmpfs of ``tmp_bytes`` (a disk-filling test hits that cap);
- the network namespace has only a loopback (bubblewrap brings ``lo`` up): sockets to 127.0.0.1 work, anything
  else is unreachable;
- rlimits on CPU seconds, address space, file size and open files; ``RLIMIT_NPROC`` is also set but is not
  enforced for root (CI runs as root), so a fork bomb is stopped by the wall-clock watchdog, which kills the
  whole process group (and with it bubblewrap's pid namespace), not by a process limit;
- pytest runs with ``-p no:cacheprovider -o addopts=`` and an in-child plugin that records each test's outcome by
  node id (the exact ids, where junit XML would need converting back).

It contains mistakes and casual misuse by generated patches and tests; it is not a boundary against a determined
attacker (hostile code belongs in a container or VM). Without bubblewrap, ``AGENTMILL_SANDBOX=python-only`` runs the
same child directly in the host temp copy with the rlimits and watchdog only, and the report says "network not
isolated".
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmill.core import bubblewrap

OUTCOMES = ("passed", "failed", "error", "skipped")

CHILD = r'''
import json, os, shutil, sys
req = json.loads(sys.stdin.read())
src, work = req["src"], req["work"]
if src != work:
    shutil.copytree(src, work, symlinks=True)
os.chdir(work)
for p in reversed(req["pythonpath"]):
    sys.path.insert(0, os.path.join(work, p))
answer = os.dup(1)
log = os.open(os.path.join(req["tmp"], "pytest.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.dup2(log, 1); os.dup2(log, 2)
outcomes, errors, reprs = {}, [], {}
class Recorder:
    def pytest_runtest_logreport(self, report):
        prev = outcomes.get(report.nodeid)
        if report.when == "call" or report.outcome != "passed":
            o = report.outcome if report.when == "call" or report.outcome == "skipped" else "error"
            if prev in (None, "passed") or o in ("failed", "error"):
                outcomes[report.nodeid] = o
            if o in ("failed", "error") and len(reprs) < 50:
                reprs[report.nodeid] = report.longreprtext[-4000:]
        elif prev is None:
            outcomes[report.nodeid] = "passed"
    def pytest_collectreport(self, report):
        if report.failed:
            errors.append([report.nodeid, report.longreprtext[-2000:]])
rc = -1
try:
    import pytest
    args = ["-p", "no:cacheprovider", "-o", "addopts=", "-q", "--tb=short", "-W", "ignore::DeprecationWarning"]
    args += ["--deselect=" + d for d in req["deselect"]]
    rc = int(pytest.main(args + req["targets"], plugins=[Recorder()]))
except BaseException as e:
    errors.append(["<session>", repr(e)[:2000]])
try:
    sys.stdout.flush(); sys.stderr.flush()
except BaseException:
    pass
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
data = json.dumps({"cpu_s": ru.ru_utime + ru.ru_stime, "rc": rc, "outcomes": outcomes, "collection_errors": errors, "reprs": reprs}).encode()
while data:
    data = data[os.write(answer, data):]
os._exit(0)
'''


@dataclass(frozen=True)
class SandboxLimits:
    """Caps for one pytest run (defaults sized for the small suites of the corpus)."""

    wall_s: float = 60.0
    """Wall-clock watchdog: the process group is killed after this many seconds."""
    cpu_s: int = 120
    """RLIMIT_CPU of the child."""
    memory_bytes: int = 4 << 30
    """RLIMIT_AS (4 GiB)."""
    file_bytes: int = 256 << 20
    """RLIMIT_FSIZE: the largest file the child may write."""
    tmp_bytes: int = 512 << 20
    """Size of the child's private ``/tmp`` (the whole copy plus whatever tests write) under bubblewrap."""
    nproc: int = 256
    """RLIMIT_NPROC (not enforced for root; the watchdog is what stops a fork bomb)."""
    open_files: int = 256
    """RLIMIT_NOFILE."""
    output_cap: int = 20_000
    """Characters of pytest's own console output kept in the report (its tail)."""


@dataclass
class TestReport:
    """One pytest run. ``outcomes`` maps node id -> passed | failed | error | skipped."""

    __test__ = False  # not a pytest class

    outcomes: dict[str, str] = field(default_factory=dict)
    collection_errors: list[list[str]] = field(default_factory=list)
    reprs: dict[str, str] = field(default_factory=dict)
    rc: int | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    status: str = "ok"
    """ok | timeout | crashed | output_error (the child died or wrote no answer: ``detail`` says why)."""
    detail: str = ""
    isolation: str = ""
    console_tail: str = ""

    def failed(self) -> list[str]:
        return sorted(k for k, v in self.outcomes.items() if v in ("failed", "error"))

    def passed(self) -> list[str]:
        return sorted(k for k, v in self.outcomes.items() if v == "passed")

    def all_pass(self, ids: Sequence[str]) -> bool:
        """Every id in ``ids`` ran and passed, with no collection error and a clean exit of the child."""
        return (self.status == "ok" and not self.collection_errors
                and all(self.outcomes.get(i) == "passed" for i in ids))

    def to_dict(self) -> dict[str, Any]:
        return {"outcomes": self.outcomes, "collection_errors": self.collection_errors, "rc": self.rc,
                "wall_s": self.wall_s, "cpu_s": self.cpu_s, "status": self.status, "detail": self.detail,
                "isolation": self.isolation}


def isolation_mode() -> str:
    """``bwrap`` when bubblewrap runs here, ``python-only`` when ``AGENTMILL_SANDBOX`` accepts less; raises
    ``RuntimeError`` (with the install hint) otherwise."""
    mode = bubblewrap.mode()
    if mode == "python-only":
        return mode
    why = bubblewrap.probe()
    if why is not None:
        raise RuntimeError(f"cannot run the pytest oracle sandboxed: {why}; {bubblewrap.INSTALL_HINT}")
    return "bwrap"


def copy_tree(src: Path, dst: Path, changes: Mapping[str, str | None] | None = None) -> Path:
    """A plain copy of ``src`` (without ``.git``) at ``dst`` with ``changes`` (relative path -> new text, None =
    delete) written over it. Paths in ``changes`` must be relative and stay inside ``dst``."""
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for rel, text in (changes or {}).items():
        p = (dst / rel).resolve()
        if Path(rel).is_absolute() or not p.is_relative_to(dst.resolve()):
            raise ValueError(f"patch path {rel!r} leaves the repository")
        if text is None:
            p.unlink(missing_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
    return dst


def _limits(lim: SandboxLimits) -> None:  # preexec_fn: runs in the child before exec
    resource.setrlimit(resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_AS, (lim.memory_bytes, lim.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_bytes, lim.file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim.open_files, lim.open_files))
    resource.setrlimit(resource.RLIMIT_NPROC, (lim.nproc, lim.nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


CHILD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
             "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8",
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The child's whole environment. Plugin autoload is off: the venv's pytest plugins cost ~4 s of start-up per run
[M] and none of the corpus suites needs one."""


def run_pytest(root: str | os.PathLike[str], *, changes: Mapping[str, str | None] | None = None,
               targets: Sequence[str] = (), deselect: Sequence[str] = (), pythonpath: Sequence[str] = (".",),
               limits: SandboxLimits = SandboxLimits()) -> TestReport:
    """Run pytest on a fresh copy of ``root`` with ``changes`` applied, in the sandbox; never raises for anything
    the tests do (a timeout, a crash, a missing answer become ``status``). ``targets`` are test files or node ids
    (empty: pytest's own discovery), ``deselect`` node ids left out, ``pythonpath`` entries relative to the
    repository root put first on ``sys.path`` (``src`` for a src layout)."""
    iso = isolation_mode()
    host_tmp = Path(tempfile.mkdtemp(prefix="agentmill-pyrepo-"))
    rep = TestReport(isolation=iso)
    try:
        copy = copy_tree(Path(root), host_tmp / "repo", changes)
        env = dict(CHILD_ENV)
        if iso == "bwrap":
            req = {"src": "/repo", "work": bubblewrap.WORKDIR + "/repo", "tmp": bubblewrap.WORKDIR}
            env.update(HOME=bubblewrap.WORKDIR, TMPDIR=bubblewrap.WORKDIR)
            cmd = bubblewrap.command([sys.executable, "-I", "-c", CHILD], env=env, tmp_bytes=limits.tmp_bytes)
            at = cmd.index("--chdir")
            cmd[at:at] = ["--ro-bind", str(copy), "/repo"]
        else:
            (host_tmp / "home").mkdir()
            req = {"src": str(copy), "work": str(copy), "tmp": str(host_tmp)}
            env.update(HOME=str(host_tmp / "home"), TMPDIR=str(host_tmp / "home"))
            cmd = [sys.executable, "-I", "-c", CHILD]
        req.update(targets=list(targets), deselect=list(deselect), pythonpath=list(pythonpath))
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=str(host_tmp), env=env, preexec_fn=lambda: _limits(limits), start_new_session=True)
        try:
            out, err = p.communicate(json.dumps(req).encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rep.status, rep.detail = "timeout", f"wall clock limit {limits.wall_s:g} s exceeded; process group killed"
        rep.wall_s = time.perf_counter() - t0
        rep.console_tail = err.decode(errors="replace")[-limits.output_cap:]
        if rep.status == "ok":
            try:
                ans = json.loads(out.decode(errors="replace"))
                rep.rc = ans["rc"]
                rep.cpu_s = float(ans.get("cpu_s", 0.0))
                rep.outcomes = {str(k): str(v) for k, v in ans["outcomes"].items()}
                rep.collection_errors = [list(map(str, e)) for e in ans["collection_errors"]]
                rep.reprs = {str(k): str(v) for k, v in ans.get("reprs", {}).items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                rep.status = "crashed"
                rep.detail = (f"child exited {p.returncode} without an answer"
                              f"{' (killed by signal ' + str(-p.returncode) + ')' if (p.returncode or 0) < 0 else ''}"
                              f": {rep.console_tail[-300:]}")
    finally:
        shutil.rmtree(host_tmp, ignore_errors=True)
    return rep


def layers() -> dict[str, Any]:
    """What contains a run on this machine (for records)."""
    iso = isolation_mode()
    return {"isolation": iso, "network": "loopback only" if iso == "bwrap" else "network not isolated",
            "filesystem": "read-only bind + private size-capped /tmp" if iso == "bwrap" else "host temp copy",
            "process_limit": "watchdog kills the process group (RLIMIT_NPROC is not enforced for root)",
            "boundary": "contains mistakes and casual misuse; not a boundary against a determined attacker"}
