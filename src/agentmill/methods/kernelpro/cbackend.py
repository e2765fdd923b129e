"""The C backend: source policy, a sandboxed gcc build, the link check and the disassembly.

Builds are content-addressed: the shared object of (source, flags, compiler version) is kept under
``core.paths.cache_root()/kernelpro/so/<hash>.so`` so a candidate seen before is never compiled twice. The compile
runs in a child through :func:`agentmill.core.sandbox.run_command` (rlimits, watchdog, scrubbed environment, fresh
temp dir; fresh namespaces without network when bubblewrap is present): the source goes in on stdin and the shared
object comes back on stdout, so the compiler sees no file of this machine outside ``/usr``."""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agentmill.core.paths import cache_root
from agentmill.core.records import write_bytes_atomic
from agentmill.core.sandbox import SandboxLimits, run_command

ALLOWED_INCLUDES = frozenset({"math.h", "stdint.h", "stddef.h", "string.h", "immintrin.h", "omp.h"})
"""[R] Headers a candidate may include (also keeps error messages from quoting arbitrary files)."""
FORBIDDEN_IDENTIFIERS = ("asm", "__asm__", "__asm", "system", "fork", "execl", "execv", "execve", "execvp", "open",
                         "fopen", "socket", "dlopen", "mmap", "syscall", "signal", "getenv", "popen", "clock_gettime",
                         "gettimeofday", "rdtsc", "__rdtsc")
"""[R] Identifiers a candidate may not use (no processes, files, sockets, inline assembly or clock reads)."""
ALLOWED_SYMBOL = re.compile(
    r"^(?:(?:exp|log|sqrt|tanh|sin|cos|pow|fabs|fmax|fmin|floor|ceil|erf|expm1|log1p)f?|_ZGV\w+|memcpy|memset|"
    r"memmove|GOMP_\w+|omp_\w+|__cxa_finalize|_ITM_\w+|__gmon_start__|__stack_chk_fail|__\w+_finite)$")
"""[R] Undefined dynamic symbols a built kernel may import: libm (scalar and libmvec ``_ZGV*``), mem*, OpenMP."""
BLAS_SYMBOL = re.compile(r"^(?:s|d)gemm_?$|^cblas_\w+$")
COMPILE_LIMITS = SandboxLimits(wall_s=60.0, cpu_s=60, cpu_hard_s=62, memory_bytes=2 << 30, max_file_bytes=64 << 20,
                               max_open_files=256, tmp_bytes=256 << 20)
"""[R] Compile child caps: CPU 60 s, address space 2 GiB, files 64 MiB."""


class PolicyError(ValueError):
    """The source breaks the C source policy (nothing was compiled)."""


@dataclass(frozen=True)
class Build:
    """A compile's outcome: ``ok`` with the shared object's path, or the compiler's stderr head."""

    ok: bool
    so_path: str
    key: str
    stderr: str
    compile_s: float
    cached: bool


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def check_policy(source: str) -> None:
    """Raise :class:`PolicyError` unless every ``#include`` is allowed and no forbidden identifier appears."""
    code = _strip_comments(source)
    for m in re.finditer(r"#\s*include\s*[<\"]([^>\"]+)[>\"]", code):
        if m.group(1) not in ALLOWED_INCLUDES:
            raise PolicyError(f"#include <{m.group(1)}> is not allowed (allowed: {', '.join(sorted(ALLOWED_INCLUDES))})")
    if re.search(r"#\s*(?:include_next|import|pragma\s+GCC\s+push_options)", code):
        raise PolicyError("preprocessor directive not allowed")
    words = set(re.findall(r"[A-Za-z_]\w*", code))
    bad = sorted(w for w in words if w in FORBIDDEN_IDENTIFIERS or w.startswith("exec"))
    if bad:
        raise PolicyError(f"forbidden identifier(s): {', '.join(bad)}")
    if not re.search(r"\bvoid\s+kernel\s*\(", code):
        raise PolicyError("the source defines no `void kernel(...)`")


@functools.cache
def gcc_version() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc not found: the C backend needs the system C compiler (apt-get install gcc)")
    return subprocess.run([gcc, "-dumpfullversion"], capture_output=True, text=True).stdout.strip()


def so_dir() -> Path:
    return cache_root() / "kernelpro" / "so"


def build_key(source: str, flags: tuple[str, ...]) -> str:
    return hashlib.sha256(f"{gcc_version()}\0{' '.join(flags)}\0{source}".encode()).hexdigest()[:24]


def compile_c(source: str, flags: tuple[str, ...]) -> Build:
    """Compile ``source`` with ``gcc <flags> -fPIC -shared -lm`` in the sandbox (cached by content).

    Policy violations raise :class:`PolicyError`; compiler errors return ``Build(ok=False)`` with the stderr
    head (a candidate outcome, never a crash of the caller)."""
    check_policy(source)
    for f in flags:
        if not re.fullmatch(r"-(?:O[0-3s]|march=[\w.-]+|mtune=[\w.-]+|ffast-math|fno-[\w-]+|funroll-loops|fopenmp|"
                            r"mprefer-vector-width=\d+|fopt-info-vec(?:-all)?|mf16c|ffp-contract=\w+|fno-tree-vectorize)",
                            f):
            raise PolicyError(f"compiler flag {f!r} is not allowed")
    key = build_key(source, flags)
    so = so_dir() / f"{key}.so"
    if so.exists():
        return Build(True, str(so), key, "", 0.0, True)
    gcc = shutil.which("gcc") or "gcc"
    cmd = f"{gcc} {' '.join(flags)} -fPIC -shared -x c - -o k.so -lm 1>&2 && cat k.so"
    t0 = time.perf_counter()
    r = run_command(["/bin/sh", "-c", cmd], limits=COMPILE_LIMITS, stdin=source.encode(), isolate=True,
                    max_output=64 << 20)
    dt = time.perf_counter() - t0
    err = r.stderr.decode(errors="replace")
    if r.returncode != 0 or not r.stdout.startswith(b"\x7fELF"):
        why = "compile timeout" if r.timed_out else err.strip()[:2000] or f"compiler exit {r.returncode}"
        return Build(False, "", key, why, dt, False)
    write_bytes_atomic(so, r.stdout)
    return Build(True, str(so), key, err[:2000], dt, False)


def undefined_symbols(so_path: str) -> list[str]:
    """The shared object's undefined dynamic symbols (``nm -D --undefined-only``), version suffixes dropped."""
    out = subprocess.run(["nm", "-D", "--undefined-only", so_path], capture_output=True, text=True).stdout
    return sorted({line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()})


def disassemble(so_path: str, symbol: str = "kernel") -> str:
    """AT&T disassembly of ``symbol`` without raw bytes (``objdump -d --no-show-raw-insn -M att``)."""
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "att", f"--disassemble={symbol}", so_path],
                          capture_output=True, text=True).stdout


def link_check(so_path: str, *, allow_library: bool) -> str | None:
    """None when the build imports only allowed symbols and has no ``syscall``; else the reason."""
    syms = undefined_symbols(so_path)
    blas = [s for s in syms if BLAS_SYMBOL.match(s)]
    if blas and not allow_library:
        return f"library policy: BLAS symbol(s) {', '.join(blas)} under a no-library track"
    bad = [s for s in syms if not ALLOWED_SYMBOL.match(s) and not BLAS_SYMBOL.match(s)]
    if bad:
        return f"undefined symbol(s) not allowed: {', '.join(bad[:8])}"
    full = subprocess.run(["objdump", "-d", "--no-show-raw-insn", so_path], capture_output=True, text=True).stdout
    if re.search(r"\ssyscall\b", full):
        return "the binary contains a syscall instruction"
    return None


def disassemble_all(so_path: str) -> str:
    """AT&T disassembly of the whole text section (the kernel plus static helpers and OpenMP outlined bodies)."""
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "att", so_path],
                          capture_output=True, text=True).stdout
