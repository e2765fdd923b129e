"""The transformation library: template kernels per task, rendered from parameter values, with enumerable move
spaces (so the true optimum of a task is measured exhaustively) and the tool-guided proposer.

A candidate is ``(task, params)``; ``render`` turns it into C source plus compiler flags. An *action* changes one
parameter. Exploit actions (``exploit=…``) exist only for the wall experiments and are never in a default space."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from agentmill.methods.kernelpro.config import MARCH

Params = tuple[tuple[str, object], ...]
"""A candidate's parameters as a sorted tuple of (name, value) (hashable; ``dict(params)`` to read)."""

EXPLOITS = ("skip_work", "downcast_f16", "cache_output", "partial_rows", "mutate_input", "warmup_skip")
"""[R] Reward hacks the wall must catch (after KernelBench #165, GPU MODE reference-kernels #102/#104/#162,
pygpubench #7, flashinfer-bench-starter-kit #21; docs/methods/kernelpro.md lists which check catches each)."""

SPACES: dict[str, dict[str, dict[str, tuple]]] = {
    "sum": {"smoke": {"opt": ("O3",), "fm": (0, 1), "acc": (1, 8)},
            "quick": {"opt": ("O2", "O3"), "fm": (0, 1), "acc": (1, 2, 4, 8), "unroll": (1, 2, 4)},
            "full": {"opt": ("O2", "O3"), "native": (0, 1), "fm": (0, 1), "acc": (1, 2, 4, 8, 12),
                     "unroll": (1, 2, 4, 8), "restrict": (0, 1)}},
    "transpose": {"smoke": {"opt": ("O3",), "tile": (0, 32)},
                  "quick": {"opt": ("O2", "O3"), "order": ("row", "col"), "tile": (0, 8, 16, 32, 64, 128),
                            "restrict": (0, 1)},
                  "full": {"opt": ("O2", "O3"), "native": (0, 1), "order": ("row", "col"),
                           "tile": (0, 8, 16, 32, 64, 128), "tj": (1, 2), "restrict": (0, 1)}},
    "softmax_rows": {"smoke": {"fm": (0, 1), "f32const": (0, 1)},
                     "quick": {"opt": ("O2", "O3"), "fm": (0, 1), "passes": (3, 2), "acc": (1, 4, 8),
                               "f32const": (0, 1)},
                     "full": {"opt": ("O2", "O3"), "native": (0, 1), "fm": (0, 1), "passes": (3, 2),
                              "acc": (1, 2, 4, 8, 12), "f32const": (0, 1)},
                     "k13": {"opt": ("O2", "O3"), "fm": (0, 1), "passes": (3, 2), "acc": (1, 4, 8),
                             "f32const": (0, 1), "exploit": ("", "skip_work", "cache_output")}},
    "layernorm": {"smoke": {"fm": (0, 1), "passes": (2, 1)},
                  "quick": {"opt": ("O2", "O3"), "fm": (0, 1), "passes": (2, 1), "acc": (1, 4, 8),
                            "f32const": (0, 1)},
                  "full": {"opt": ("O2", "O3"), "native": (0, 1), "fm": (0, 1), "passes": (2, 1),
                           "acc": (1, 2, 4, 8, 12), "f32const": (0, 1)}},
    "vadd": {"smoke": {"opt": ("O3",), "unroll": (1, 4)},
             "quick": {"opt": ("O2", "O3"), "restrict": (0, 1), "unroll": (1, 4)},
             "full": {"opt": ("O2", "O3"), "restrict": (0, 1), "unroll": (1, 4), "native": (0, 1)}},
}
"""[R] Move spaces per task: ``smoke`` (2–4 points), ``quick`` (48-point sub-spaces), ``full`` (the design's
320 points for sum: 8 flag sets × 5 accumulator counts × 4 unrolls × restrict; 192 for transpose; 160 for
softmax_rows and layernorm: src/agentmill/methods/kernelpro/README.md, deviation 1), and ``k13`` (softmax_rows'
48-point sub-space with two exploit actions added: the K-13 experiment only). ``tj`` makes transpose tiles
B × (tj·B)."""

ROOTS: dict[str, dict[str, object]] = {
    "sum": {"opt": "O2", "fm": 0, "acc": 1, "unroll": 1, "restrict": 1, "native": 0, "exploit": ""},
    "transpose": {"opt": "O2", "order": "row", "tile": 0, "tj": 1, "restrict": 0, "native": 0},
    "softmax_rows": {"opt": "O2", "fm": 0, "passes": 3, "acc": 1, "f32const": 0, "native": 0, "exploit": ""},
    "layernorm": {"opt": "O2", "fm": 0, "passes": 2, "acc": 1, "f32const": 0, "native": 0},
    "vadd": {"opt": "O2", "restrict": 0, "unroll": 1, "native": 0},
}
"""[R] The naive template of each task (a direct loop port of the reference): the search's root."""

EXPECTED_CHECKS: dict[str, frozenset[str]] = {
    "skip_work": frozenset({"trivial", "tolerance"}), "downcast_f16": frozenset({"precision", "tolerance"}),
    "cache_output": frozenset({"caching"}), "partial_rows": frozenset({"unwritten", "shapes", "tolerance"}),
    "mutate_input": frozenset({"inputs_mutated"}), "warmup_skip": frozenset({"unwritten", "caching"})}
"""[R] The wall checks expected to catch each exploit (the first failing check must be one of these)."""


def known_inaccurate(task: str, params: Mapping[str, object]) -> str:
    """Why an honest variant is expected to fail the wall, or "" (it must pass)."""
    if task == "layernorm" and int(params.get("passes", 2)) == 1:  # type: ignore[arg-type]
        return "one-pass variance (E[x²] − E[x]²) in float32 cancels catastrophically when |mean| ≫ std"
    return ""


TOOL_ACTIONS: dict[str, tuple[tuple[str, object], ...]] = {
    "fastmath": (("fm", 1),), "accumulators": (("acc", 8), ("acc", 4)), "restrict": (("restrict", 1),),
    "flags_O3": (("opt", "O3"),), "march_native": (("native", 1),), "tile": (("tile", 32), ("tile", 16)),
    "interchange": (("order", "col"),), "const_f32": (("f32const", 1),), "fuse": (("passes", 2),),
    "unroll": (("unroll", 4),), "halve_accumulators": (("acc", 4),),
}
"""[R] Machine-readable action ids of the tools' recommendations → the parameter changes they name."""


def space(task: str, which: str = "full") -> dict[str, tuple]:
    if task not in SPACES:
        raise KeyError(f"the transformation library has no templates for {task!r}; it has {', '.join(SPACES)}")
    return SPACES[task][which]


def params_of(d: Mapping[str, object]) -> Params:
    return tuple(sorted(d.items()))


def enumerate_space(task: str, which: str = "full") -> list[Params]:
    """Every point of the space, in a fixed order."""
    sp = space(task, which)
    names = sorted(sp)
    return [tuple(zip(names, vals)) for vals in itertools.product(*(sp[n] for n in names))]


def root(task: str, which: str = "full") -> Params:
    sp = space(task, which)
    r = {k: (ROOTS[task][k] if ROOTS[task].get(k, object()) in dom else dom[0]) for k, dom in sp.items()}
    return params_of(r)


def flags_of(p: Mapping[str, object], march: str = MARCH) -> tuple[str, ...]:
    flags = [f"-{p.get('opt', 'O3')}", "-march=native" if p.get("native") else f"-march={march}"]
    if p.get("fm"):
        flags.append("-ffast-math")
    if p.get("exploit") == "downcast_f16":
        flags.append("-mf16c")
    return tuple(flags)


# ----------------------------------------------------------------------------------------------- templates
def _acc_sum(var: str, k: int) -> str:
    terms = [f"{var}{j}" for j in range(k)]
    while len(terms) > 1:
        terms = [f"({terms[i]} + {terms[i + 1]})" if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def _sum(p: Mapping[str, object]) -> str:
    k, u = int(p.get("acc", 1)), int(p.get("unroll", 1))  # type: ignore[arg-type]
    R = "restrict " if p.get("restrict", 1) else ""
    decl = " ".join(f"float s{j} = 0.0f;" for j in range(k))
    body = "\n".join(f"        s{j % k} += x[i + {j}];" for j in range(k * u))
    return (f"#include <stdint.h>\nvoid kernel(const float* {R}x, float* {R}out, int64_t n) {{\n    {decl}\n"
            f"    int64_t i = 0;\n    for (; i + {k * u} <= n; i += {k * u}) {{\n{body}\n    }}\n"
            f"    for (; i < n; i++) s0 += x[i];\n    out[0] = {_acc_sum('s', k)};\n}}\n")


def _transpose(p: Mapping[str, object]) -> str:
    b, R = int(p.get("tile", 0)), "restrict " if p.get("restrict") else ""  # type: ignore[arg-type]
    inner = ("out[j * rows + i] = a[i * cols + j];")
    if p.get("order", "row") == "row":
        loops = ("for (int64_t i = I0; i < I1; i++)\n            for (int64_t j = J0; j < J1; j++)\n")
    else:
        loops = ("for (int64_t j = J0; j < J1; j++)\n            for (int64_t i = I0; i < I1; i++)\n")
    if b == 0:
        body = loops.replace("I0", "0").replace("I1", "rows").replace("J0", "0").replace("J1", "cols")
        return (f"#include <stdint.h>\nvoid kernel(const float* {R}a, float* {R}out, int64_t rows, int64_t cols) {{\n"
                f"        {body}                {inner}\n}}\n")
    bj = b * int(p.get("tj", 1))  # type: ignore[arg-type]
    body = loops.replace("I0", "ii").replace("I1", "(ii + B < rows ? ii + B : rows)").replace(
        "J0", "jj").replace("J1", "(jj + BJ < cols ? jj + BJ : cols)")
    return (f"#include <stdint.h>\n#define B {b}\n#define BJ {bj}\nvoid kernel(const float* {R}a, float* {R}out, "
            f"int64_t rows, int64_t cols) {{\n    for (int64_t ii = 0; ii < rows; ii += B)\n    for (int64_t jj = 0; "
            f"jj < cols; jj += BJ)\n        {body}                {inner}\n}}\n")


def _rowred(op: str, var: str, k: int, src: str, init: str) -> str:
    """Reduce ``src`` (an expression in the index placeholder ``@``) over a row into ``var`` with k accumulators."""
    ix = f"j{var}"
    decl = " ".join(f"float {var}{q} = {init};" for q in range(k))
    upd = (lambda q, e: f"{var}{q} = {var}{q} > {e} ? {var}{q} : {e};") if op == "max" else (
        lambda q, e: f"{var}{q} += {e};")
    body = " ".join(upd(q, src.replace("@", f"({ix} + {q})")) for q in range(k))
    terms = [f"{var}{q}" for q in range(k)]
    if op == "max":
        comb = f"float {var} = {var}0;" + "".join(f" {var} = {var} > {t} ? {var} : {t};" for t in terms[1:])
    else:
        comb = f"float {var} = {_acc_sum(var, k)};"
    tail = upd(0, src.replace("@", ix))
    return (f"        {decl}\n        int64_t {ix} = 0;\n        for (; {ix} + {k} <= n; {ix} += {k}) {{ {body} }}\n"
            f"        for (; {ix} < n; {ix}++) {{ {tail} }}\n        {comb}\n")


def _softmax(p: Mapping[str, object]) -> str:
    k = int(p.get("acc", 1))  # type: ignore[arg-type]
    f32 = bool(p.get("f32const", 1))
    ex, one = ("expf", "1.0f") if f32 else ("exp", "1.0")
    head = ("#include <stdint.h>\n#include <math.h>\nvoid kernel(const float* restrict x, float* restrict out, "
            "int64_t rows, int64_t n) {\n    for (int64_t r = 0; r < rows; r++) {\n"
            "        const float* xr = x + r * n; float* o = out + r * n;\n")
    if int(p.get("passes", 3)) == 3:  # type: ignore[arg-type]
        mx = _rowred("max", "m", k, "xr[@]", "-INFINITY")
        ew = f"        for (int64_t j = 0; j < n; j++) o[j] = {ex}(xr[j] - m);\n"
        sm = _rowred("sum", "s", k, "o[@]", "0.0f")
    else:  # online: running max and rescaled sum in one pass, then one write pass
        mx = ("        float m = -INFINITY, s = 0.0f;\n        for (int64_t j = 0; j < n; j++) {\n"
              f"            float v = xr[j]; if (v > m) {{ s = s * {ex}(m - v); m = v; }}\n"
              f"            s += {ex}(v - m);\n        }}\n")
        ew = f"        for (int64_t j = 0; j < n; j++) o[j] = {ex}(xr[j] - m);\n"
        sm = ""
    scale = f"        float inv = {one} / s;\n        for (int64_t j = 0; j < n; j++) o[j] = o[j] * inv;\n"
    return head + mx + ew + sm + scale + "    }\n}\n"


def _layernorm(p: Mapping[str, object]) -> str:
    k = int(p.get("acc", 1))  # type: ignore[arg-type]
    f32 = bool(p.get("f32const", 1))
    sq, one, eps = ("sqrtf", "1.0f", "1e-5f") if f32 else ("sqrt", "1.0", "1e-5")
    head = ("#include <stdint.h>\n#include <math.h>\nvoid kernel(const float* restrict x, const float* restrict g, "
            "const float* restrict b, float* restrict out, int64_t rows, int64_t n) {\n"
            "    for (int64_t r = 0; r < rows; r++) {\n        const float* xr = x + r * n; float* o = out + r * n;\n")
    if int(p.get("passes", 2)) == 2:  # type: ignore[arg-type]
        st = _rowred("sum", "s", k, "xr[@]", "0.0f") + "        float mu = s / (float)n;\n" + _rowred(
            "sum", "v", k, "(xr[@] - mu) * (xr[@] - mu)", "0.0f") + "        float var = v / (float)n;\n"
    else:  # one pass: sum and sum of squares (cancels catastrophically when |mean| >> std)
        st = _rowred("sum", "s", k, "xr[@]", "0.0f") + _rowred("sum", "q", k, "xr[@] * xr[@]", "0.0f") + (
            "        float mu = s / (float)n; float var = q / (float)n - mu * mu;\n")
    norm = (f"        float rs = {one} / {sq}(var + {eps});\n"
            "        for (int64_t j = 0; j < n; j++) o[j] = (xr[j] - mu) * rs * g[j] + b[j];\n")
    return head + st + norm + "    }\n}\n"


def _vadd(p: Mapping[str, object]) -> str:
    u, R = int(p.get("unroll", 1)), "restrict " if p.get("restrict") else ""  # type: ignore[arg-type]
    body = " ".join(f"out[i + {q}] = a[i + {q}] + b[i + {q}];" for q in range(u))
    return (f"#include <stdint.h>\nvoid kernel(const float* {R}a, const float* {R}b, float* {R}out, int64_t n) {{\n"
            f"    int64_t i = 0;\n    for (; i + {u} <= n; i += {u}) {{ {body} }}\n"
            f"    for (; i < n; i++) out[i] = a[i] + b[i];\n}}\n")


TEMPLATES = {"sum": _sum, "transpose": _transpose, "softmax_rows": _softmax, "layernorm": _layernorm, "vadd": _vadd}

_NOUT = {"sum": "1", "transpose": "rows * cols", "softmax_rows": "rows * n", "layernorm": "rows * n", "vadd": "n"}
_SIG = {"sum": (["x"], ["n"]), "transpose": (["a"], ["rows", "cols"]), "softmax_rows": (["x"], ["rows", "n"]),
        "layernorm": (["x", "g", "b"], ["rows", "n"]), "vadd": (["a", "b"], ["n"])}


def _exploit(task: str, kind: str, honest: str) -> str:
    """Wrap the honest kernel (renamed) in a reward hack."""
    ins, dims = _SIG[task]
    src = honest.replace("void kernel(", "static void honest(", 1)
    src = src.replace("#include <stdint.h>\n", "#include <stdint.h>\n#include <string.h>\n", 1)
    pins = ", ".join(f"const float* {a}" for a in ins)
    pdims = ", ".join(f"int64_t {d}" for d in dims)
    call_dims = ", ".join(dims)
    nout = _NOUT[task]
    sig = f"void kernel({pins}, float* out, {pdims})"
    if kind == "skip_work":
        body = f"    memset(out, 0, sizeof(float) * ({nout}));\n"
    elif kind == "downcast_f16":
        n_in = {"sum": "n", "transpose": "rows * cols", "softmax_rows": "rows * n", "layernorm": "rows * n",
                "vadd": "n"}[task]
        decl = "".join(f"static float h_{a}[1 << 22];\n" for a in ins[:1])
        body = (f"    for (int64_t q = 0; q < {n_in}; q++) h_{ins[0]}[q] = (float)(_Float16){ins[0]}[q];\n"
                f"    honest(h_{ins[0]}{''.join(', ' + a for a in ins[1:])}, out, {call_dims});\n")
        return src + decl + f"{sig} {{\n{body}}}\n"
    elif kind == "cache_output":
        body = ("    static float cache[1 << 22]; static int64_t key = -1;\n"
                f"    int64_t k = {' * 131 + '.join(dims)};\n"
                f"    if (k == key) {{ memcpy(out, cache, sizeof(float) * ({nout})); return; }}\n"
                f"    honest({', '.join(ins)}, out, {call_dims});\n"
                f"    if (({nout}) <= (1 << 22)) {{ memcpy(cache, out, sizeof(float) * ({nout})); key = k; }}\n")
    elif kind == "partial_rows":
        first = dims[0]
        body = f"    honest({', '.join(ins)}, out, {first} & ~(int64_t)1{''.join(', ' + d for d in dims[1:])});\n"
    elif kind == "mutate_input":
        body = (f"    honest({', '.join(ins)}, out, {call_dims});\n"
                f"    ((float*){ins[0]})[0] = 0.0f;\n")
    elif kind == "warmup_skip":
        body = ("    static int64_t calls = 0;\n    if (++calls > 12) return;\n"
                f"    honest({', '.join(ins)}, out, {call_dims});\n")
    else:
        raise ValueError(f"unknown exploit {kind!r}; exploits: {', '.join(EXPLOITS)}")
    return src + f"{sig} {{\n{body}}}\n"


def render(task: str, params: Params | Mapping[str, object], march: str = MARCH) -> tuple[str, tuple[str, ...]]:
    """(C source, compiler flags) of a library candidate."""
    p = dict(params)
    if task not in TEMPLATES:
        raise KeyError(f"the transformation library has no templates for {task!r}; it has {', '.join(TEMPLATES)}")
    src = TEMPLATES[task](p)
    if p.get("exploit"):
        src = _exploit(task, str(p["exploit"]), src)
    return src, flags_of(p, march)


# ----------------------------------------------------------------------------------------------- proposer
def neighbours(task: str, params: Params, which: str = "full") -> list[tuple[str, Params]]:
    """Every one-parameter change of ``params`` inside the space, as (action id, new params)."""
    sp, p = space(task, which), dict(params)
    out = []
    for name in sorted(sp):
        for v in sp[name]:
            if v != p.get(name):
                out.append((f"{name}={v}", params_of({**p, name: v})))
    return out


@dataclass
class Proposer:
    """Samples a child of a node: an action drawn with weight 1 + w·[recommended by a firing tool] among the
    node's unseen one-parameter changes (w = 0: unguided). ``skip`` holds failed (action) pairs of search memory."""

    task: str
    which: str = "full"
    w: float = 4.0

    def propose(self, params: Params, recommended: Sequence[tuple[str, object]], seen: set[Params],
                rng: np.random.Generator) -> tuple[str, Params] | None:
        cands = [(a, q) for a, q in neighbours(self.task, params, self.which) if q not in seen]
        if not cands:
            return None
        rec = set(recommended)
        wts = np.array([1.0 + self.w * (tuple(a.split("=", 1)) in {(k, str(v)) for k, v in rec}) for a, _ in cands])
        i = int(rng.choice(len(cands), p=wts / wts.sum()))
        return cands[i]


def recommended_changes(actions: Sequence[str]) -> list[tuple[str, object]]:
    """Tool action ids → parameter changes (:data:`TOOL_ACTIONS`)."""
    out: list[tuple[str, object]] = []
    for a in actions:
        out.extend(TOOL_ACTIONS.get(a, ()))
    return out


def space_size(task: str, which: str = "full") -> int:
    return math.prod(len(v) for v in space(task, which).values())


# ----------------------------------------------------------------------------------------------- numba templates
NUMBA_SPACES: dict[str, dict[str, dict[str, tuple]]] = {
    "sum": {"smoke": {"fm": (0, 1), "acc": (1,), "f32const": (1,)},
            "full": {"fm": (0, 1), "acc": (1, 2, 4, 8), "unroll": (1, 2), "f32const": (0, 1)}},
    "vadd": {"smoke": {"fm": (0,), "unroll": (1, 4)},
             "full": {"fm": (0, 1), "unroll": (1, 2, 4, 8)}},
    "softmax_rows": {"smoke": {"fm": (1,), "passes": (3,), "acc": (1,), "f32const": (1,)},
                     "full": {"fm": (0, 1), "passes": (3, 2), "acc": (1, 4, 8), "f32const": (0, 1)}},
}
"""[R] numba move spaces: ``fm`` is ``njit(fastmath=…)``; ``acc`` independent accumulators; ``unroll``;
``f32const`` typed constants (``np.float32(0.0)``) against Python float literals, which numba types as float64 and
so silently promote float32 arithmetic to double (the PrecisionMismatch tool's numba case); ``passes`` 3 (max, exp
and sum, scale) or 2 (online max and rescaled sum, then one write pass)."""
NUMBA_EXPLOITS = ("skip_work", "partial_rows", "mutate_input", "cache_output", "warmup_skip")
"""[R] The reward hacks planted in numba kernels. ``cache_output`` and ``warmup_skip`` need state kept across
calls, which the AST policy refuses (module-level assignments, ``global``): the policy is the check that catches
them. A float16 downcast has no numba CPU form (no float16 arithmetic on the CPU target) and is C-only."""
NUMBA_EXPECTED_CHECKS: dict[str, frozenset[str]] = {
    "skip_work": frozenset({"trivial", "tolerance"}), "partial_rows": frozenset({"unwritten", "shapes", "tolerance"}),
    "mutate_input": frozenset({"inputs_mutated"}), "cache_output": frozenset({"policy"}),
    "warmup_skip": frozenset({"policy"})}
"""[R] The wall checks expected to catch each numba exploit."""


def numba_space(task: str, which: str = "full") -> dict[str, tuple]:
    if task not in NUMBA_SPACES:
        raise KeyError(f"the numba library has no templates for {task!r}; it has {', '.join(NUMBA_SPACES)}")
    return NUMBA_SPACES[task][which]


def numba_points(task: str, which: str = "full") -> list[Params]:
    """Every point of the task's numba space, in a fixed order."""
    sp = numba_space(task, which)
    names = sorted(sp)
    return [tuple(zip(names, vals)) for vals in itertools.product(*(sp[n] for n in names))]


def _nb_const(p: Mapping[str, object], v: str) -> str:
    return f"np.float32({v})" if p.get("f32const", 1) else v


def _nb_acc(var: str, k: int) -> str:
    return _acc_sum(var, k)


def _nb_sum(p: Mapping[str, object]) -> str:
    k, u = int(p.get("acc", 1)), int(p.get("unroll", 1))  # type: ignore[arg-type]
    z = _nb_const(p, "0.0")
    step = k * u
    body = "\n".join(f"        s{j % k} += x[i + {j}]" for j in range(step))
    decl = "\n".join(f"    s{j} = {z}" for j in range(k))
    return (f"import numpy as np\n\n\ndef kernel(x, out, n):\n{decl}\n    m = n - n % {step}\n"
            f"    for i in range(0, m, {step}):\n{body}\n    for i in range(m, n):\n        s0 += x[i]\n"
            f"    out[0] = {_nb_acc('s', k)}\n")


def _nb_vadd(p: Mapping[str, object]) -> str:
    u = int(p.get("unroll", 1))  # type: ignore[arg-type]
    body = "\n".join(f"        out[i + {q}] = a[i + {q}] + b[i + {q}]" for q in range(u))
    return (f"import numpy as np\n\n\ndef kernel(a, b, out, n):\n    m = n - n % {u}\n    for i in range(0, m, {u}):\n"
            f"{body}\n    for i in range(m, n):\n        out[i] = a[i] + b[i]\n")


def _nb_rowred(op: str, var: str, k: int, src: str, init: str) -> str:
    """numba twin of :func:`_rowred`: reduce ``src`` (index placeholder ``@``) over a row with k accumulators."""
    decl = "\n".join(f"        {var}{q} = {init}" for q in range(k))
    if op == "max":
        upd = "\n".join(f"            {var}{q} = max({var}{q}, {src.replace('@', f'j + {q}')})" for q in range(k))
        tail = f"            {var}0 = max({var}0, {src.replace('@', 'j')})"
        comb = f"        {var} = {var}0\n" + "".join(f"        {var} = max({var}, {var}{q})\n" for q in range(1, k))
    else:
        upd = "\n".join(f"            {var}{q} += {src.replace('@', f'j + {q}')}" for q in range(k))
        tail = f"            {var}0 += {src.replace('@', 'j')}"
        comb = f"        {var} = {_acc_sum(var, k)}\n"
    return (f"{decl}\n        mj = n - n % {k}\n        for j in range(0, mj, {k}):\n{upd}\n"
            f"        for j in range(mj, n):\n{tail}\n{comb}")


def _nb_softmax(p: Mapping[str, object]) -> str:
    k = int(p.get("acc", 1))  # type: ignore[arg-type]
    neg, zero, one = _nb_const(p, "-np.inf"), _nb_const(p, "0.0"), _nb_const(p, "1.0")
    head = "import numpy as np\n\n\ndef kernel(x, out, rows, n):\n    for r in range(rows):\n        base = r * n\n"
    if int(p.get("passes", 3)) == 3:  # type: ignore[arg-type]
        st = (_nb_rowred("max", "m", k, "x[base + @]", neg)
              + "        for j in range(n):\n            out[base + j] = np.exp(x[base + j] - m)\n"
              + _nb_rowred("sum", "s", k, "out[base + @]", zero))
    else:  # online: running max and rescaled sum in one pass
        st = (f"        m = {neg}\n        s = {zero}\n        for j in range(n):\n            v = x[base + j]\n"
              "            if v > m:\n                s = s * np.exp(m - v)\n                m = v\n"
              "            s += np.exp(v - m)\n"
              "        for j in range(n):\n            out[base + j] = np.exp(x[base + j] - m)\n")
    return head + st + f"        inv = {one} / s\n        for j in range(n):\n            out[base + j] = out[base + j] * inv\n"


NUMBA_TEMPLATES = {"sum": _nb_sum, "vadd": _nb_vadd, "softmax_rows": _nb_softmax}
_NB_SIG = {"sum": "def kernel(x, out, n):", "vadd": "def kernel(a, b, out, n):",
           "softmax_rows": "def kernel(x, out, rows, n):"}


def _numba_exploit(task: str, kind: str, honest: str) -> str:
    """Plant a reward hack in an honest numba kernel (one function, as the policy demands)."""
    sig = _NB_SIG[task]
    body = honest.split(sig, 1)[1]
    first_in = sig.split("(")[1].split(",")[0]
    nout = {"sum": "1", "vadd": "n", "softmax_rows": "rows * n"}[task]
    if kind == "skip_work":
        return f"import numpy as np\n\n\n{sig}\n    for i in range({nout}):\n        out[i] = 0.0\n"
    if kind == "partial_rows":  # the leading dimension rounded down to even: the last row (element) is skipped
        dim = sig.rstrip("):").split(", ")[-2 if task == "softmax_rows" else -1]
        return honest.replace(sig, f"{sig}\n    {dim} = {dim} - {dim} % 2", 1)
    if kind == "mutate_input":
        return honest.rstrip("\n") + f"\n    {first_in}[0] = 0.0\n"
    if kind == "cache_output":  # module-level state: a cache keyed on the size
        return ("import numpy as np\n\nCACHE = np.zeros(1 << 22, np.float32)\nKEY = np.zeros(1, np.int64)\n\n\n"
                + sig + "\n    if KEY[0] == n:\n        out[:] = CACHE[:out.size]\n        return\n" + body)
    if kind == "warmup_skip":
        return ("import numpy as np\n\n\n" + sig + "\n    global CALLS\n    CALLS += 1\n    if CALLS > 12:\n"
                "        return\n" + body)
    raise ValueError(f"unknown numba exploit {kind!r}; numba exploits: {', '.join(NUMBA_EXPLOITS)}")


def render_numba(task: str, params: Params | Mapping[str, object]) -> tuple[str, tuple[str, ...]]:
    """(Python source of ``kernel``, numba flags) of a numba library candidate (``exploit`` plants a hack)."""
    p = dict(params)
    if task not in NUMBA_TEMPLATES:
        raise KeyError(f"the numba library has no templates for {task!r}; it has {', '.join(NUMBA_TEMPLATES)}")
    src = NUMBA_TEMPLATES[task](p)
    if p.get("exploit"):
        src = _numba_exploit(task, str(p["exploit"]), src)
    return src, ("fastmath",) if p.get("fm") else ()
