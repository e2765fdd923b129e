"""The numba backend: the AST policy refuses each forbidden construct; the LLVM assembler parser feeds the
hot-loop analysis; a numba candidate compiled in the sandboxed child passes the wall while planted exploits are
caught; ``inspect_asm`` feeds PrecisionMismatch, which fires on a float64 literal in an f32 kernel only."""

from __future__ import annotations

import pytest

from agentmill.methods.kernelpro import asm, library, numba_backend, wall
from agentmill.methods.kernelpro.cbackend import PolicyError
from agentmill.methods.kernelpro.config import TimingConfig, ToolThresholds
from agentmill.methods.kernelpro.feedback import Profile
from agentmill.methods.kernelpro.tasks import get_task
from agentmill.methods.kernelpro.tools import rules

FAST = TimingConfig(max_repeats=5, min_repeats=5, budget_s=0.3)
OK = ("import numpy as np\n\n\ndef kernel(x, out, n):\n    s = np.float32(0.0)\n    for i in range(n):\n"
      "        s += x[i]\n    out[0] = s\n")


def test_the_honest_template_passes_the_policy() -> None:
    fn = numba_backend.check_policy(OK, get_task("sum"))
    assert fn.name == "kernel" and len(fn.args.args) == 3


@pytest.mark.parametrize("src, why", [
    (OK + "\n\ndef helper():\n    pass\n", "exactly one function"),
    (OK.replace("def kernel", "def kern"), "named `kernel`"),
    ("import os\n" + OK, "import of os"),
    ("from subprocess import run\n" + OK, "import of subprocess"),
    (OK.replace("s += x[i]", "s += x.__len__()"), "starting with `_`"),
    (OK.replace("s += x[i]", "s += time.time()"), "name 'time'"),
    (OK.replace("s += x[i]", "eval('1')"), "name 'eval'"),
    (OK.replace("s += x[i]", "open('f')"), "name 'open'"),
    ("import numpy as np\nCACHE = np.zeros(4)\n" + OK.split("\n", 1)[1], "module-level Assign"),
    (OK.replace("    s = np.float32(0.0)", "    global S\n    s = np.float32(0.0)"), "`global`"),
    (OK.replace("s += x[i]", "s += np.dot(x, x)"), "np.dot"),
    (OK.replace("s += x[i]", "s += x @ x"), "`@`"),
    (OK.replace("s += x[i]", "s += np.linalg.norm(x)"), "np.linalg"),
    (OK.replace("s += x[i]", "s += np.einsum('i,i', x, x)"), "np.einsum"),
    (OK.replace("def kernel(x, out, n):", "def kernel(x, out):"), "needs 3"),
    (OK.replace("s += x[i]", "s += (lambda v: v)(x[i])"), "exactly one function"),
    ("@numba.njit\n" + OK.split("\n", 3)[3], "decorators"),
])
def test_the_policy_refuses_each_forbidden_construct(src: str, why: str) -> None:
    with pytest.raises(PolicyError, match=why.replace("(", r"\(").replace("`", "`")):
        numba_backend.check_policy(src, get_task("sum"))


def test_a_library_track_admits_blas_calls() -> None:
    numba_backend.check_policy(OK.replace("s += x[i]", "s += np.dot(x, x)"), allow_library=True)


LLVM = """\
_ZN13_3cdynamic_3e6kernelB2v1E5ArrayIfLi1E1C7mutable7alignedE:
\tmovq\t16(%rsp), %r8
\tmovabsq\t$.LCPI0_0, %rsi
\tvmovsd\t(%rsi), %xmm1
\txorl\t%r9d, %r9d
.LBB0_5:
\tvmovss\t(%rdx,%r9,4), %xmm2
\tvcvtss2sd\t%xmm2, %xmm2, %xmm2
\tvmulsd\t%xmm1, %xmm2, %xmm2
\tvaddsd\t%xmm2, %xmm0, %xmm0
\taddq\t$8, %r9
\tcmpq\t%r9, %r8
\tjne\t.LBB0_5
\tmovabsq\t$expf, %rax
\tcallq\t*%rax
\tretq
_ZN7cpython13_3cdynamic_3e6kernelB2v1E:
.LBB1_1:
\tvaddps\t%ymm0, %ymm1, %ymm1
\tjne\t.LBB1_1
"""


def test_the_llvm_parser_resolves_labels_suffixes_and_indirect_calls() -> None:
    insns = asm.parse_llvm(LLVM)
    assert {i.func for i in insns} == {"_ZN13_3cdynamic_3e6kernelB2v1E5ArrayIfLi1E1C7mutable7alignedE"}
    jne = next(i for i in insns if i.mnem == "jne")
    assert jne.ops.endswith("<.LBB0_5>") and int(jne.ops.split()[0], 16) == 4  # the vmovss after the label
    assert any(i.mnem == "add" and i.ops == "$0x8,%r9" for i in insns)
    assert next(i for i in insns if i.mnem == "call").ops == "<expf>"
    hot = asm.hot_loop_of(insns)
    assert hot is not None and (hot.scalar_fp, hot.fp64, hot.f2d_conv, hot.n_insns) == (2, 2, 1, 7)
    assert asm.stride(asm.loops(insns)[0]) == 8


@pytest.mark.numba
@pytest.mark.slow  # ~4 s: one sandboxed child imports numba and compiles six kernels
def test_numba_candidates_pass_the_wall_and_planted_exploits_are_caught() -> None:
    pytest.importorskip("numba")
    t = get_task("sum")
    honest = [library.render_numba("sum", {"fm": 1, "acc": 8, "unroll": 1, "f32const": 1}),
              library.render_numba("sum", {"fm": 0, "acc": 2, "unroll": 2, "f32const": 0})]
    exploits = list(library.NUMBA_EXPLOITS)
    cands = honest + [library.render_numba("sum", {"exploit": e}) for e in exploits]
    evs = wall.evaluate_many(t, cands, timing=FAST, backend="numba")
    for ev in evs[:2]:
        assert ev.status == "correct", ev.wall
        assert ev.speedup > 0 and ev.compile_s > 0 and ev.backend == "numba"
        assert numba_backend.hot_loop(ev.asm) is not None
    for e, ev in zip(exploits, evs[2:]):
        assert ev.status != "correct", e
        assert ev.wall.failed_check in library.NUMBA_EXPECTED_CHECKS[e], (e, ev.wall)
    fast_hot = numba_backend.hot_loop(evs[0].asm)
    assert fast_hot.packed_fp > 0 and fast_hot.packed_by_width["256"] > 0  # fastmath vectorises (pinned haswell)
    bad = wall.evaluate_many(t, [(OK.replace("s += x[i]", "s += undefined_name"), ())], backend="numba")[0]
    assert bad.status == "compile_error" and "undefined_name" in bad.wall.evidence


@pytest.mark.numba
@pytest.mark.slow  # ~6 s: four sandboxed numba compiles
def test_numba_fixtures_precision_mismatch_and_scalar_fallback() -> None:
    """PrecisionMismatch fires on ``a[i] * 0.5`` and not on ``a[i] * np.float32(0.5)``; ScalarFallback fires on an
    in-order numba sum and not under fastmath (the hot loop read from ``inspect_asm``)."""
    pytest.importorskip("numba")
    from agentmill.methods.kernelpro import fixtures
    from agentmill.methods.kernelpro.tools import diagnose

    fxs = fixtures.numba_fixtures()
    assert {(f.tool, f.positive) for f in fxs} == {("PrecisionMismatch", True), ("PrecisionMismatch", False),
                                                   ("ScalarFallback", True), ("ScalarFallback", False)}
    for fx in fxs:
        prof, rep = fixtures.profile_fixture(fx, None, {})
        assert prof.hot is not None and prof.signals["backend"] == "numba"
        fs, _ = diagnose(prof, rep, tools=(fx.tool,), affinity=False)
        assert bool(fs) == fx.positive, (fx.tool, fx.positive, prof.hot)
        if fx.tool == "PrecisionMismatch" and fx.positive:
            assert fs[0].actions == ["const_f32"] and fs[0].metrics["f2d_conversions"] > 0
    direct = rules.precision_mismatch(Profile("vadd", (8,), (), None, []), None, ToolThresholds())
    assert direct is None  # no loops, nothing to flag
