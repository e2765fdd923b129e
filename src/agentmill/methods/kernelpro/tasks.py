"""The task suite: CPU analogues of KernelBench Level-1 operators, each with a numpy reference (the "eager"
baseline), a float64 reference for the wall, the C signature candidates implement, analytic flops F and compulsory
bytes Q, sizes per cache regime, and the tolerance rule.

C calling convention of every task: ``void kernel(const float* in_0, ..., float* out, int64_t d_0, ...)``; the
dimensions are the shape tuple. Cost conventions [R]: one flop per add, multiply or compare, an FMA counts 2, a
transcendental counts 10; Q counts each input read once and each output written once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Task:
    """One operator. ``kind`` picks the wall's tolerance rule: ``elementwise``, ``reduction`` (sum-like, bound
    c·sqrt(K)·eps·sum|terms|), ``normalise`` (softmax/layernorm: rtol grows with sqrt(K)), ``movement``
    (transpose: exact)."""

    name: str
    n_inputs: int
    kind: str
    dims: tuple[str, ...]
    sizes: dict[str, Shape]
    """Regimes by working set: S (L1), M (L2), L (L3 share), XL (DRAM); ``search`` is the size the search times."""
    make: Callable[[Shape, np.random.Generator, str], list[np.ndarray]]
    out_shape: Callable[[Shape], Shape]
    ref32: Callable[..., np.ndarray]
    ref64: Callable[..., np.ndarray]
    flops: Callable[[Shape], float]
    bytes: Callable[[Shape], float]
    reassoc: bool = False
    """Whether reassociation (fast-math reductions) is allowed by the task's precision policy."""
    terms_k: Callable[[Shape], int] = lambda s: 1
    """Length K of the reduction behind each output element (tolerance bound)."""
    odd_shapes: Callable[[Shape], list[Shape]] = field(default=lambda s: [])
    """The wall's extra shapes (n-1, n+1, a prime, 1; odd rows and columns for 2-D)."""
    probe: str = "probe16"
    """The precision probe's input distribution: one whose float32 and float16 results differ by far more than the
    tolerance (values near 2048, float16 spacing 2; for sums, values below float16's range)."""

    @property
    def signature(self) -> str:
        ins = ", ".join(f"const float* restrict in_{i}" for i in range(self.n_inputs))
        dims = ", ".join(f"int64_t {d}" for d in self.dims)
        return f"void kernel({ins}, float* restrict out, {dims})"

    def ai(self, shape: Shape) -> float:
        return self.flops(shape) / self.bytes(shape)


def _dist(shape: Shape, rng: np.random.Generator, dist: str) -> np.ndarray:
    if dist == "normal":
        x = rng.standard_normal(shape)
    elif dist == "uniform":
        x = rng.uniform(-1000, 1000, shape)
    elif dist == "cancel":
        x = rng.standard_normal(shape) + 1000.0
    elif dist == "probe16":  # values near 2048 with fractional parts: float16's spacing there is 2
        x = 2048.0 + rng.uniform(0, 1, shape) * 3.0 + 0.37
    elif dist == "tiny16":  # below float16's smallest subnormal (6e-8): float16 flushes them, float32 keeps them
        x = rng.uniform(1e-9, 5e-8, shape)
    else:
        raise ValueError(f"unknown input distribution {dist!r}")
    x = np.asarray(x, dtype=np.float32)
    flat = x.reshape(-1)
    if flat.size >= 8 and dist not in ("probe16", "tiny16"):  # exact zeros and negatives (every distribution but the probe)
        flat[1:: max(1, flat.size // 5)] = 0.0
    return x


def _prime_near(n: int) -> int:
    k = max(2, n - 1)
    while any(k % d == 0 for d in range(2, int(k ** 0.5) + 1)):
        k -= 1
    return k


def _odd1(s: Shape) -> list[Shape]:
    n = s[0]
    return [(max(1, n - 1),), (n + 1,), (_prime_near(n),), (1,)]


def _odd2(s: Shape) -> list[Shape]:
    m, n = s
    return [(m + 1, n), (m, n + 1), (_prime_near(m), _prime_near(n)), (1, n), (m, 1)]


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm(x, g, b):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _stencil(x):
    p = np.pad(x, 1)
    return 0.5 * x + 0.125 * (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:])


def _rows(make1):
    return lambda s, rng, d: [_dist(s, rng, d)] + make1(s, rng)


TASKS: dict[str, Task] = {}


def _add(t: Task) -> None:
    if t.name in TASKS:
        raise ValueError(f"duplicate task {t.name}")
    TASKS[t.name] = t


_add(Task("vadd", 2, "elementwise", ("n",),
          {"S": (1024,), "M": (32768,), "L": (524288,), "XL": (1 << 25,), "search": (1 << 18,)},
          lambda s, rng, d: [_dist(s, rng, d), _dist(s, rng, d)], lambda s: s,
          lambda a, b: a + b, lambda a, b: a.astype(np.float64) + b, lambda s: s[0], lambda s: 12.0 * s[0],
          odd_shapes=_odd1))
_add(Task("axpy", 2, "elementwise", ("n",),
          {"S": (1024,), "M": (32768,), "L": (524288,), "XL": (1 << 25,), "search": (1 << 18,)},
          lambda s, rng, d: [_dist(s, rng, d), _dist(s, rng, d)], lambda s: s,
          lambda x, y: np.float32(2.5) * x + y, lambda x, y: 2.5 * x.astype(np.float64) + y,
          lambda s: 2.0 * s[0], lambda s: 12.0 * s[0], odd_shapes=_odd1))
_add(Task("gelu", 1, "elementwise", ("n",),
          {"S": (2048,), "M": (65536,), "L": (1 << 20,), "XL": (1 << 25,), "search": (1 << 18,)},
          lambda s, rng, d: [_dist(s, rng, d)], lambda s: s,
          lambda x: _gelu(x).astype(np.float32), lambda x: _gelu(x.astype(np.float64)),
          lambda s: 18.0 * s[0], lambda s: 8.0 * s[0], odd_shapes=_odd1))
_add(Task("sum", 1, "reduction", ("n",),
          {"S": (4096,), "M": (131072,), "L": (1 << 21,), "XL": (1 << 26,), "search": (1 << 20,)},
          lambda s, rng, d: [_dist(s, rng, d)], lambda s: (1,),
          lambda x: np.array([x.sum()], dtype=np.float32), lambda x: np.array([x.astype(np.float64).sum()]),
          lambda s: float(s[0]), lambda s: 4.0 * s[0], reassoc=True, terms_k=lambda s: s[0], odd_shapes=_odd1,
          probe="tiny16"))
_add(Task("transpose", 1, "movement", ("rows", "cols"),
          {"S": (32, 64), "M": (256, 256), "L": (1024, 1024), "XL": (8192, 4096), "search": (512, 512)},
          lambda s, rng, d: [_dist(s, rng, d)], lambda s: (s[1], s[0]),
          lambda a: np.ascontiguousarray(a.T), lambda a: a.T.astype(np.float64),
          lambda s: 0.0, lambda s: 8.0 * s[0] * s[1], odd_shapes=_odd2))
_add(Task("softmax_rows", 1, "normalise", ("rows", "cols"),
          {"S": (8, 512), "M": (64, 2048), "L": (512, 4096), "XL": (16384, 4096), "search": (32, 2048)},
          lambda s, rng, d: [_dist(s, rng, d)], lambda s: s,
          lambda x: _softmax(x).astype(np.float32), lambda x: _softmax(x.astype(np.float64)),
          lambda s: 13.0 * s[0] * s[1], lambda s: 8.0 * s[0] * s[1], terms_k=lambda s: s[1], odd_shapes=_odd2))
_add(Task("layernorm", 3, "normalise", ("rows", "cols"),
          {"S": (8, 512), "M": (64, 2048), "L": (512, 4096), "XL": (16384, 4096), "search": (32, 2048)},
          lambda s, rng, d: [_dist(s, rng, d), rng.uniform(0.5, 1.5, s[1]).astype(np.float32),
                             rng.uniform(-1, 1, s[1]).astype(np.float32)], lambda s: s,
          lambda x, g, b: _layernorm(x, g, b).astype(np.float32),
          lambda x, g, b: _layernorm(x.astype(np.float64), g.astype(np.float64), b.astype(np.float64)),
          lambda s: 8.0 * s[0] * s[1], lambda s: 8.0 * s[0] * s[1] + 8.0 * s[1], terms_k=lambda s: s[1],
          odd_shapes=_odd2))
_add(Task("stencil5", 1, "elementwise", ("rows", "cols"),
          {"S": (32, 64), "M": (256, 256), "L": (1024, 1024), "XL": (8192, 4096), "search": (1024, 1024)},
          lambda s, rng, d: [_dist(s, rng, d)], lambda s: s,
          lambda x: _stencil(x).astype(np.float32), lambda x: _stencil(x.astype(np.float64)),
          lambda s: 5.0 * s[0] * s[1], lambda s: 8.0 * s[0] * s[1], odd_shapes=_odd2))
_add(Task("gemm", 2, "reduction", ("n",),
          {"S": (32,), "M": (128,), "L": (512,), "XL": (2048,), "search": (256,)},
          lambda s, rng, d: [_dist((s[0], s[0]), rng, d), _dist((s[0], s[0]), rng, d)], lambda s: (s[0], s[0]),
          lambda a, b: a @ b, lambda a, b: a.astype(np.float64) @ b.astype(np.float64),
          lambda s: 2.0 * s[0] ** 3, lambda s: 12.0 * s[0] ** 2, reassoc=True, terms_k=lambda s: s[0],
          odd_shapes=lambda s: [(s[0] - 1,), (s[0] + 1,), (_prime_near(s[0]),), (1,)]))


def get_task(name: str) -> Task:
    """The task named ``name``; a clear error listing the suite otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}") from None


def shape_for(task: Task, size: str) -> Shape:
    """The shape of ``task`` at ``size`` (S, M, L, XL, search) with a clear error for an unknown size."""
    if size not in task.sizes:
        raise KeyError(f"task {task.name} has no size {size!r}; sizes: {', '.join(task.sizes)}")
    return task.sizes[size]


def terms_abs(task: Task, inputs: list[np.ndarray]) -> np.ndarray | float:
    """sum|terms| behind each output element, for the reduction tolerance (float64)."""
    if task.name == "sum":
        return float(np.abs(inputs[0].astype(np.float64)).sum())
    if task.name == "gemm":
        return np.abs(inputs[0].astype(np.float64)) @ np.abs(inputs[1].astype(np.float64))
    raise ValueError(f"task {task.name} is not a reduction")
