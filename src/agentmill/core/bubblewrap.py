"""The sandbox's operating-system boundary: bubblewrap (``bwrap``, Debian package ``bubblewrap``).

Why an OS layer: CPython audit hooks and AST checks are not a security boundary (PEP 578); code that reaches the
real builtins can remove them. bubblewrap puts the child in new user, mount, pid, network, IPC, UTS and cgroup
namespaces as uid/gid 65534 with every capability dropped, no new privileges, no further user namespaces, and a
filesystem made of read-only binds of only what Python needs (``/usr`` and the interpreter's and virtualenv's own
directories), a fresh ``/proc`` of its own pid namespace, a minimal ``/dev`` and a size-capped private ``/tmp``
(its working directory). The user's files, the project's records and the parent's processes are not there to read,
change or signal; the network namespace has only a loopback with nothing listening. The child dies with its
parent (``--die-with-parent``).

``AGENTMILL_SANDBOX=python-only`` accepts running without it (the static policy, rlimits, seccomp and the audit
hook still apply), for machines where bubblewrap cannot run; nothing is silently downgraded.
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Mapping

ENV_MODE = "AGENTMILL_SANDBOX"
MODES = ("bwrap", "python-only")
INSTALL_HINT = ("install bubblewrap (`apt-get install bubblewrap`, or `make sandbox-deps`), or set "
                "AGENTMILL_SANDBOX=python-only to accept the weaker Python-level layers")
NOBODY = "65534"
WORKDIR = "/tmp/work"
"""The child's working directory, inside its private ``/tmp``; the audit hook's ``files="tmpdir"`` root."""


def mode() -> str:
    """The configured mode: ``bwrap`` unless ``AGENTMILL_SANDBOX`` says ``python-only``."""
    m = os.environ.get(ENV_MODE, "bwrap").strip() or "bwrap"
    if m not in MODES:
        raise ValueError(f"{ENV_MODE}={m!r}: expected one of {', '.join(MODES)}")
    return m


def python_roots() -> list[str]:
    """Directories the child interpreter reads: its prefixes, standard library and site-packages (deduplicated;
    a directory under another one, or under ``/usr``, is covered by that one)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    paths.update(v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib"))
    paths.update(site.getsitepackages())
    found = {os.path.abspath(p) for p in paths if p and os.path.isdir(p)}
    found |= {os.path.realpath(p) for p in found}  # both the names the interpreter uses and their symlink targets
    roots: list[str] = []
    for p in sorted(found):
        if p in ("/", "/usr") or p.startswith("/usr/") or any(p.startswith(r + os.sep) for r in roots):
            continue
        roots.append(p)
    return roots


def system_binds() -> list[str]:
    """``/usr`` read-only, the merged-/usr symlinks (``/bin -> usr/bin``) as symlinks, the loader cache."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args + ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]


def command(argv: list[str], *, env: Mapping[str, str], tmp_bytes: int) -> list[str]:
    """``argv`` wrapped in bwrap; the child starts in ``WORKDIR`` of its private ``/tmp`` (a tmpfs of
    ``tmp_bytes``)."""
    cmd = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--uid", NOBODY, "--gid", NOBODY,
           "--hostname", "sandbox", "--cap-drop", "ALL", "--die-with-parent", "--clearenv"]
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    # The private /tmp first: binds made before it would be hidden under it (a virtualenv in /tmp, as CI's clone has).
    cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(int(tmp_bytes)), "--tmpfs", "/tmp", "--dir", WORKDIR]
    cmd += system_binds()
    for root in python_roots():
        cmd += ["--ro-bind", root, root]
    return cmd + ["--chdir", WORKDIR, "--"] + list(argv)


@functools.cache
def probe() -> str | None:
    """None when bwrap runs a trivial child here with the sandbox's flags, else why not (cached per process)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        p = subprocess.run(command([sys.executable, "-I", "-c", "pass"], env={}, tmp_bytes=1 << 20),
                           capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap could not start: {e}"
    if p.returncode != 0:
        return f"bwrap fails here (exit {p.returncode}): {p.stderr.decode(errors='replace').strip()[:300]}"
    return None


__all__ = ["ENV_MODE", "INSTALL_HINT", "MODES", "command", "mode", "probe", "python_roots", "system_binds"]
