"""The numba backend: a candidate is the source of one Python function ``kernel`` with the C calling convention
of its task (flat float32 arrays for the inputs and the output, then the int64 dimensions), compiled inside the
sandboxed run child with ``numba.njit(fastmath=…, boundscheck=False, cache=False)`` for that one signature.

The parent checks the source against an AST allow-list before anything runs (:func:`check_policy`); the child
compiles, runs and times it beside the numpy reference (``harness.CHILD``) and returns the kernel's assembly from
``dispatcher.inspect_asm(signature)``, which :func:`hot_loop` reads with the same hot-loop analysis as the C
backend's objdump text. The target CPU is pinned with ``NUMBA_CPU_NAME`` (:data:`NUMBA_CPU`) so numba tables and
fixtures compare with the C builds' ``-march=x86-64-v3``."""

from __future__ import annotations

import ast
import functools
import hashlib

from agentmill.methods.kernelpro import asm
from agentmill.methods.kernelpro.cbackend import PolicyError
from agentmill.methods.kernelpro.tasks import Task

NUMBA_CPU = "haswell"
"""[R] ``NUMBA_CPU_NAME`` of every numba build: LLVM's ``haswell`` is AVX2 + FMA + BMI1/2 + F16C + MOVBE, the
feature set of ``-march=x86-64-v3`` that the C builds are pinned to (16 vector registers, no AVX-512)."""
NUMBA_CPU_FEATURES = "+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+popcnt"
"""``NUMBA_CPU_FEATURES`` beside :data:`NUMBA_CPU`: numba takes the *host's* feature list when this is unset, so on an
AVX-512 host a "haswell" build still used zmm registers (found on an Intel Xeon with AVX-512, session 36); the
features named here are haswell's own, so no host feature leaks in."""
ALLOWED_MODULES = frozenset({"numpy", "numba", "math"})
"""[R] Modules a numba candidate may import."""
FORBIDDEN_NAMES = frozenset({"gc", "sys", "os", "time", "ctypes", "open", "eval", "exec", "compile", "globals",
                             "__import__", "getattr", "setattr", "delattr", "vars", "locals", "breakpoint", "input",
                             "subprocess", "socket", "builtins", "__builtins__", "importlib"})
"""[R] Names a numba candidate may not mention (no interpreter, process, clock or file access)."""
LIBRARY_CALLS = frozenset({"dot", "vdot", "matmul", "einsum", "inner", "outer", "tensordot", "linalg"})
"""[R] numpy entry points that delegate to BLAS: refused (with ``@``) under a no-library track."""
FASTMATH = "fastmath"
"""The flag that turns on ``njit(fastmath=True)`` (a numba candidate's flags are a subset of {fastmath})."""


@functools.cache
def numba_version() -> str:
    """The installed numba's version, or a clear error naming the extra that installs it."""
    try:
        import numba
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("the numba backend needs numba: pip install 'agentmill[kernelpro]'") from e
    return str(numba.__version__)


def check_policy(source: str, task: Task | None = None, *, allow_library: bool = False) -> ast.FunctionDef:
    """Raise :class:`PolicyError` unless ``source`` is one function ``kernel`` whose only other statements are
    imports of numpy/numba/math; no attribute or name starting with ``_``; no forbidden name; no ``global`` or
    ``nonlocal``; no module-level assignment (no state across calls); and, under a no-library track, no BLAS-backed
    numpy call or ``@``. With ``task``, the arity must be the task's (inputs, output, dimensions). Returns the
    function's AST."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise PolicyError(f"syntax error: {e.msg} (line {e.lineno})") from None
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                         ast.ClassDef))]
    if len(funcs) != 1 or not isinstance(funcs[0], ast.FunctionDef):
        raise PolicyError(f"the source must define exactly one function (found {len(funcs)} function/class "
                          "definitions or lambdas)")
    fn = funcs[0]
    if fn.name != "kernel":
        raise PolicyError(f"the function must be named `kernel`, not {fn.name!r}")
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            bad = [m for m in mods if m.split(".")[0] not in ALLOWED_MODULES]
            if bad or (isinstance(stmt, ast.ImportFrom) and stmt.level):
                raise PolicyError(f"import of {', '.join(bad) or 'a relative module'} is not allowed (allowed: "
                                  f"{', '.join(sorted(ALLOWED_MODULES))})")
        elif stmt is not fn and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            raise PolicyError(f"module-level {type(stmt).__name__} is not allowed (no global state: the source is "
                              "imports plus one function)")
    if fn.decorator_list:
        raise PolicyError("decorators are not allowed (the harness compiles the function itself)")
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise PolicyError("`global`/`nonlocal` is not allowed (no state across calls)")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            raise PolicyError("imports inside the function are not allowed")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise PolicyError(f"attribute access {node.attr!r} starting with `_` is not allowed")
        if isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("_")):
            raise PolicyError(f"name {node.id!r} is not allowed")
        if isinstance(node, ast.arg) and node.arg.startswith("_"):
            raise PolicyError(f"argument {node.arg!r} starting with `_` is not allowed")
        if not allow_library:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                raise PolicyError("library policy: `@` (BLAS matmul) under a no-library track")
            if isinstance(node, ast.Attribute) and node.attr in LIBRARY_CALLS:
                raise PolicyError(f"library policy: np.{node.attr} (BLAS) under a no-library track")
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        raise PolicyError("the kernel takes plain positional arguments only (no defaults, *args or **kwargs)")
    if task is not None:
        want = task.n_inputs + 1 + len(task.dims)
        if len(a.args) != want:
            raise PolicyError(f"kernel takes {len(a.args)} arguments; task {task.name} needs {want} "
                              f"({task.n_inputs} input(s), the output, {', '.join(task.dims)})")
    return fn


def build_key(source: str, flags: tuple[str, ...]) -> str:
    """Content hash of a numba candidate (numba version, flags, pinned CPU, source)."""
    return hashlib.sha256(f"numba {numba_version()}\0{NUMBA_CPU}\0{NUMBA_CPU_FEATURES}\0{' '.join(flags)}\0{source}"
                          .encode()
                          ).hexdigest()[:24]


def job(source: str, flags: tuple[str, ...], task: Task) -> dict:
    """The run child's job entry for one numba candidate (``harness.CHILD`` compiles it there)."""
    unknown = [f for f in flags if f != FASTMATH]
    if unknown:
        raise PolicyError(f"numba flag(s) {unknown} are not allowed (allowed: {FASTMATH})")
    return {"py": source, "fastmath": FASTMATH in flags, "n_in": task.n_inputs, "n_dims": len(task.dims)}


def kernel_insns(asm_text: str) -> list[asm.Insn]:
    """The kernel's instructions from ``inspect_asm`` text (the CPython wrapper left out)."""
    return asm.parse_llvm(asm_text)


def hot_loop(asm_text: str) -> asm.HotLoop | None:
    """The hot loop of a numba kernel's assembly (None without a loop)."""
    return asm.hot_loop_of(kernel_insns(asm_text))


def asm_signals(asm_text: str) -> tuple[asm.HotLoop | None, list[asm.HotLoop]]:
    """The hot loop and every innermost loop's classification (as ``signals.asm_signals`` for C)."""
    insns = kernel_insns(asm_text)
    return asm.hot_loop_of(insns), [asm.classify(lp.insns, lp) for lp in asm.innermost(asm.loops(insns))]


def inspect(source: str, flags: tuple[str, ...], task: Task, *, allow_library: bool = False) -> tuple[str, float]:
    """Compile a numba candidate in the sandboxed child without running it: (``inspect_asm`` text, compile
    seconds). Policy violations raise :class:`PolicyError`; a compile failure raises ``RuntimeError`` with the
    child's message."""
    from agentmill.methods.kernelpro import harness

    check_policy(source, task, allow_library=allow_library)
    res, _ = harness.run_batch([None], {"cases": [], "timing": [], "eager": "None"}, {},
                               per_job=[job(source, flags, task)])
    r = res[0]
    if isinstance(r, harness.RunFailure):
        raise RuntimeError(f"numba child failed: {r}")
    meta = r[1]
    if "compile_error" in meta:
        raise RuntimeError(meta["compile_error"])
    return str(meta["asm"]), float(meta["compile_s"])


def profile(task_name: str, asm_text: str, flags: tuple[str, ...], t: float, ceilings: object = None):
    """The cheap signals of a measured numba candidate (as ``tables.profile_candidate`` for C): the hot loop and
    every innermost loop from its ``inspect_asm`` text, its time, and the roofline fractions."""
    from agentmill.methods.kernelpro.feedback import Profile
    from agentmill.methods.kernelpro.tasks import get_task, shape_for

    task = get_task(task_name)
    shape = shape_for(task, "search")
    hot, loops = asm_signals(asm_text)
    p = Profile(task_name, shape, tuple(flags), hot, loops, {"t": t, "uses_omp": False, "backend": "numba"})
    if ceilings is not None and t == t and t > 0:
        q, f = task.bytes(shape), task.flops(shape)
        p.signals["bw_fraction"] = q / t / 1e9 / ceilings.bw(ceilings.level_of(q))  # type: ignore[attr-defined]
        p.signals["ruler_bw_fraction"] = 1.0
        p.signals["compute_fraction"] = f / t / 1e9 / ceilings.p_peak(1)  # type: ignore[attr-defined]
    return p
