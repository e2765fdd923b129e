"""The correctness wall and one candidate's evaluation: compile → link check → wall cases → interleaved timing.

A candidate earns reward only when every check passes; the first failing check is reported with its evidence.
Check ids (docs/methods/kernelpro.md, "The wall"): ``policy``, ``compile``, ``link``, ``run`` (crash, timeout,
memory), ``tolerance`` (1), ``trivial`` (2), ``shapes`` (3: failures at the extra shapes are reported as this),
``precision`` (4), ``inputs_mutated`` (5), ``caching`` (7: the A, B, A, C probe and timed outputs), ``unwritten``
(8: NaN-prefilled outputs not fully written, in checked or timed calls), ``determinism`` (11), ``implausible`` (12).
Item 6 (aliasing) cannot arise in the C calling convention (the caller owns the output buffer); item 9 holds by
construction (the float64 references are computed here, in the parent); item 10 is the random warm-up count with
the timed outputs checked."""

from __future__ import annotations

import functools
import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.methods.kernelpro import cbackend, harness
from agentmill.methods.kernelpro.config import TimingConfig, WallConfig
from agentmill.methods.kernelpro.tasks import Shape, Task, shape_for, terms_abs

EPS32 = 2.0 ** -23
SENTINEL = 0x7FC0DEAD
"""The NaN payload the child prefills outputs with (``harness.CHILD``): still there means never written."""


@dataclass
class WallVerdict:
    ok: bool
    failed_check: str = ""
    evidence: str = ""


@dataclass
class Evaluation:
    """One candidate's outcome: ``status`` is ``correct``, ``incorrect``, ``compile_error``, ``crashed``,
    ``timeout`` or ``rejected`` (policy). Times are per call in seconds (medians of interleaved repeats)."""

    status: str
    wall: WallVerdict
    t_cand: float = math.nan
    t_ref: float = math.nan
    speedup: float = math.nan
    cand_samples: list[float] = field(default_factory=list)
    ref_samples: list[float] = field(default_factory=list)
    kb_allclose: bool = False
    """KernelBench's check, ``allclose(atol=1e-2, rtol=1e-2)`` on the first nominal case: what a weaker wall says."""
    compile_s: float = 0.0
    run_s: float = 0.0
    so_path: str = ""
    key: str = ""
    layers: dict = field(default_factory=dict)
    backend: str = "c"
    asm: str = ""
    """numba candidates: the kernel's ``inspect_asm`` text (C candidates are disassembled from ``so_path``)."""

    def row(self) -> dict[str, Any]:
        return {"status": self.status, "failed_check": self.wall.failed_check, "evidence": self.wall.evidence[:300],
                "t_cand": self.t_cand, "t_ref": self.t_ref, "speedup": self.speedup, "kb_allclose": self.kb_allclose,
                "compile_s": self.compile_s, "run_s": self.run_s, "key": self.key, "backend": self.backend,
                "cand_samples": self.cand_samples, "ref_samples": self.ref_samples}


def _sha(x: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]


def tolerance_failure(task: Task, out: np.ndarray, inputs: list[np.ndarray], cfg: WallConfig) -> str | None:
    """None when ``out`` is within the task's tolerance of the float64 reference, else the evidence."""
    ref = task.ref64(*inputs)
    if out.shape != ref.shape:
        return f"shape {out.shape} != {ref.shape}"
    o = out.astype(np.float64)
    if not np.all(np.isfinite(o)) and np.all(np.isfinite(ref)):
        return f"{int((~np.isfinite(o)).sum())} non-finite outputs"
    s = float(np.abs(ref).max()) if ref.size else 0.0
    if task.kind == "movement":
        bound = np.zeros_like(ref)
    elif task.kind == "reduction":
        k = task.terms_k(tuple(inputs[0].shape[:1]))
        bound = cfg.reduction_c * math.sqrt(max(k, 1)) * EPS32 * terms_abs(task, inputs) + cfg.atol_scaled * s * EPS32
    else:
        rtol = cfg.rtol_reassoc if task.reassoc else cfg.rtol
        bound = rtol * np.abs(ref) + cfg.atol_scaled * s
        if task.kind == "normalise":
            k = inputs[0].shape[-1]
            grow = cfg.reduction_c * math.sqrt(k) * EPS32
            bound = bound + grow * np.abs(ref)
            if task.name == "layernorm":  # [D] the row mean's rounding, carried through the normalisation
                x = inputs[0].astype(np.float64)
                sd = np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)
                bound = bound + grow * np.abs(x).mean(axis=1, keepdims=True) / sd * np.abs(inputs[1])
    err = np.abs(o - ref)
    bad = err > bound
    if bad.any():
        i = int(np.argmax(np.where(bad, err - bound, -np.inf)))
        return (f"{int(bad.sum())} of {bad.size} elements out of tolerance; worst at flat index {i}: "
                f"got {o.reshape(-1)[i]:.7g}, want {ref.reshape(-1)[i]:.7g} (bound {np.broadcast_to(bound, ref.shape).reshape(-1)[i]:.3g})")
    return None


def trivial_failure(out: np.ndarray, ref: np.ndarray, inputs: list[np.ndarray]) -> str | None:
    if out.size > 1 and np.all(out == out.reshape(-1)[0]) and not np.all(ref == ref.reshape(-1)[0]):
        return f"constant output ({float(out.reshape(-1)[0]):.4g}) where the reference is not constant"
    if out.size > 1 and not np.any(out) and np.any(ref):
        return "all-zero output"
    for x in inputs:
        if x.shape == out.shape and out.size > 1 and out.tobytes() == x.tobytes() and not np.array_equal(ref, x):
            return "output bitwise equal to an input"
    return None


def cases(task: Task, shape: Shape, seed: int, cfg: WallConfig) -> list[tuple[str, Shape, str, int]]:
    """(label, shape, distribution, seed) of every checked call, in call order: nominal shape × seeds with the
    three distributions, the anti-caching probe A, B, A, C, the precision probe, and the extra shapes."""
    dists = ("normal", "uniform", "cancel")
    out = [(f"nominal/{dists[s % 3]}/s{s}", shape, dists[s % 3], seed * 100 + s) for s in range(cfg.seeds)]
    a, b, c = seed * 100 + 50, seed * 100 + 51, seed * 100 + 52
    out += [("probe/A", shape, "normal", a), ("probe/B", shape, "normal", b), ("probe/A2", shape, "normal", a),
            ("probe/C", shape, "normal", c)]
    out.append(("precision/f16probe", shape, task.probe, seed * 100 + 70))
    out += [(f"shape/{'x'.join(map(str, s))}", s, "normal", seed * 100 + 60 + i)
            for i, s in enumerate(task.odd_shapes(shape))]
    return out


def t_min(task: Task, shape: Shape, ceilings: Any) -> float | None:
    """The most generous roofline time (peak FLOP/s and L1 bandwidth, each the max over calibration repeats,
    divided by 1 + the measured spread), or None without ceilings."""
    if ceilings is None:
        return None
    p = ceilings.generous_peak() * 1e9
    bw = ceilings.generous_bw() * 1e9
    return max(task.flops(shape) / p, task.bytes(shape) / bw)


@functools.lru_cache(maxsize=8)
def _prepared(task_name: str, shape: Shape, wall_shape: Shape, seed: int, cfg: WallConfig, timing: TimingConfig):
    from agentmill.methods.kernelpro.tasks import get_task

    task = get_task(task_name)
    cs = cases(task, wall_shape, seed, cfg)
    arrays: dict[str, np.ndarray] = {}
    inputs_of: list[list[np.ndarray]] = []
    header_cases = []
    for i, (label, s, dist, sd) in enumerate(cs):
        ins = task.make(s, rng_for("kernelpro-wall", task.name, sd), dist)
        inputs_of.append(ins)
        for j, x in enumerate(ins):
            arrays[f"c{i}_{j}"] = x
        header_cases.append({"inputs": [f"c{i}_{j}" for j in range(len(ins))], "out_shape": list(task.out_shape(s)),
                             "dims": list(s)})
    tsets = []
    for r in range(cfg.rotate_inputs):
        ins = task.make(shape, rng_for("kernelpro-time", task.name, seed, r), "normal")
        tsets.append(ins)
        for j, x in enumerate(ins):
            arrays[f"t{r}_{j}"] = x
    header = {"cases": header_cases, "eager": harness.EAGER[task.name],
              "timing": [{"sets": [[f"t{r}_{j}" for j in range(task.n_inputs)] for r in range(cfg.rotate_inputs)],
                          "dims": list(shape), "out_shape": list(task.out_shape(shape)),
                          "min_batch_s": timing.min_batch_s, "max_repeats": timing.max_repeats,
                          "min_repeats": timing.min_repeats, "rse": timing.rse_target, "budget_s": timing.budget_s,
                          "seed": seed}]}
    return cs, inputs_of, tsets, arrays, header


def evaluate(task: Task, source: str, flags: tuple[str, ...], **kw: Any) -> Evaluation:
    """Compile, check and time one candidate (:func:`evaluate_many` with one)."""
    return evaluate_many(task, [(source, flags)], **kw)[0]


def evaluate_many(task: Task, candidates: list[tuple[str, tuple[str, ...]]], *, shape: Shape | None = None,
                  wall_shape: Shape | None = None, seed: int = 0, cfg: WallConfig = WallConfig(),
                  timing: TimingConfig = TimingConfig(), ceilings: Any = None, time_failures: bool = False,
                  backend: str = "c") -> list[Evaluation]:
    """Compile, check and time candidates of one task (built ones run one after another in one child, each
    interleaved with the numpy reference). ``shape`` is the timed size (default: the task's search size),
    ``wall_shape`` the checked size (default: M). ``time_failures`` also reports the speed of candidates the wall
    rejected (the K-13 table needs the speed of fast-but-wrong code). ``backend`` is ``c`` (C source and gcc
    flags) or ``numba`` (the source of one Python function; flags ⊆ {fastmath}; compiled in the run child)."""
    shape = tuple(shape or shape_for(task, "search"))
    wall_shape = tuple(wall_shape or shape_for(task, "M"))
    cs, inputs_of, tsets, arrays, header = _prepared(task.name, shape, wall_shape, seed, cfg, timing)
    if backend == "numba":
        return _evaluate_numba(task, candidates, cs, inputs_of, tsets, arrays, header, seed, cfg, timing, ceilings,
                               time_failures, wall_shape, shape)
    if backend != "c":
        raise ValueError(f"unknown backend {backend!r}; backends: c, numba")
    evs: list[Evaluation | None] = []
    runnable: list[int] = []
    for source, flags in candidates:
        try:
            build = cbackend.compile_c(source, flags)
        except cbackend.PolicyError as e:
            evs.append(Evaluation("rejected", WallVerdict(False, "policy", str(e))))
            continue
        if not build.ok:
            evs.append(Evaluation("compile_error", WallVerdict(False, "compile", build.stderr[:2000]),
                                  compile_s=build.compile_s, key=build.key))
            continue
        link = cbackend.link_check(build.so_path, allow_library=cfg.allow_library)
        if link:
            evs.append(Evaluation("rejected", WallVerdict(False, "link", link), compile_s=build.compile_s,
                                  key=build.key, so_path=build.so_path))
            continue
        evs.append(Evaluation("pending", WallVerdict(False), compile_s=build.compile_s, key=build.key,
                              so_path=build.so_path))
        runnable.append(len(evs) - 1)
    if runnable:
        warm = [int(rng_for("kernelpro-warmup", task.name, seed, evs[i].key).integers(2, 7)) for i in runnable]
        t0 = time.perf_counter()
        results, layers = harness.run_batch([evs[i].so_path for i in runnable], header, arrays, warmups=warm,
                                            threads=timing.threads)
        per = (time.perf_counter() - t0) / len(runnable)
        for i, res in zip(runnable, results):
            ev = evs[i]
            ev.run_s, ev.layers = per, layers
            if isinstance(res, harness.RunFailure):
                ev.status = "timeout" if res.kind == "timeout" else "crashed"
                ev.wall = WallVerdict(False, "run", str(res))
                continue
            outs, meta = res
            _finish(ev, task, cs, inputs_of, outs, meta, tsets, cfg, wall_shape, shape, ceilings, time_failures)
    return evs  # type: ignore[return-value]


def _evaluate_numba(task: Task, candidates: list[tuple[str, tuple[str, ...]]], cs: list, inputs_of: list,
                    tsets: list, arrays: dict, header: dict, seed: int, cfg: WallConfig, timing: TimingConfig,
                    ceilings: Any, time_failures: bool, wall_shape: Shape, shape: Shape) -> list[Evaluation]:
    """The numba path of :func:`evaluate_many`: AST policy here, compile + wall cases + timing in the child."""
    from agentmill.methods.kernelpro import numba_backend

    evs: list[Evaluation] = []
    runnable: list[int] = []
    jobs: list[dict] = []
    for source, flags in candidates:
        try:
            numba_backend.check_policy(source, task, allow_library=cfg.allow_library)
            jb = numba_backend.job(source, tuple(flags), task)
        except cbackend.PolicyError as e:
            evs.append(Evaluation("rejected", WallVerdict(False, "policy", str(e)), backend="numba"))
            continue
        evs.append(Evaluation("pending", WallVerdict(False), key=numba_backend.build_key(source, tuple(flags)),
                              backend="numba"))
        runnable.append(len(evs) - 1)
        jobs.append(jb)
    if not runnable:
        return evs
    warm = [int(rng_for("kernelpro-warmup", task.name, seed, evs[i].key).integers(2, 7)) for i in runnable]
    t0 = time.perf_counter()
    results, layers = harness.run_batch([None] * len(runnable), header, arrays, warmups=warm, threads=timing.threads,
                                        per_job=jobs)
    per = (time.perf_counter() - t0) / len(runnable)
    for i, res in zip(runnable, results):
        ev = evs[i]
        ev.run_s, ev.layers = per, layers
        if isinstance(res, harness.RunFailure):
            ev.status = "timeout" if res.kind == "timeout" else "crashed"
            ev.wall = WallVerdict(False, "run", str(res))
            continue
        outs, meta = res
        if "compile_error" in meta:
            ev.status, ev.wall = "compile_error", WallVerdict(False, "compile", meta["compile_error"])
            continue
        ev.compile_s, ev.asm = float(meta.get("compile_s", 0.0)), str(meta.get("asm", ""))
        _finish(ev, task, cs, inputs_of, outs, meta, tsets, cfg, wall_shape, shape, ceilings, time_failures)
    return evs


def _finish(ev: Evaluation, task: Task, cs: list, inputs_of: list, outs: dict, meta: dict, tsets: list,
            cfg: WallConfig, wall_shape: Shape, shape: Shape, ceilings: Any, time_failures: bool) -> None:
    verdict = judge(task, cs, inputs_of, outs, meta, tsets, cfg)
    ev.status, ev.wall = ("correct" if verdict.ok else "incorrect"), verdict
    o0 = outs.get("case0")
    if o0 is not None and o0.shape == task.out_shape(wall_shape):
        ev.kb_allclose = bool(np.allclose(o0, task.ref32(*inputs_of[0]), atol=1e-2, rtol=1e-2))
    tm = meta["timing"][0]
    if verdict.ok or time_failures:
        ev.cand_samples, ev.ref_samples = list(tm["cand_s"]), list(tm["ref_s"])
        if ev.cand_samples and ev.ref_samples:
            ev.t_cand, ev.t_ref = float(np.median(ev.cand_samples)), float(np.median(ev.ref_samples))
            ev.speedup = ev.t_ref / ev.t_cand if ev.t_cand > 0 else math.inf
    if verdict.ok and ceilings is not None:
        tm_ = t_min(task, shape, ceilings)
        if tm_ is not None and ev.t_cand < cfg.plausibility * tm_:
            ev.status, ev.wall = "incorrect", WallVerdict(
                False, "implausible", f"{ev.t_cand * 1e6:.3g} µs per call < {cfg.plausibility} × roofline minimum "
                                      f"{tm_ * 1e6:.3g} µs")


def judge(task: Task, cs: list, inputs_of: list[list[np.ndarray]], outs: dict[str, np.ndarray], meta: dict,
          tsets: list[list[np.ndarray]], cfg: WallConfig) -> WallVerdict:
    """The wall's checks over the child's answer, in order; the first failure wins."""
    for i, (label, s, dist, sd) in enumerate(cs):
        ins = inputs_of[i]
        out = outs.get(f"case{i}")
        info = meta["cases"][i] if i < len(meta.get("cases", [])) else None
        if out is None or info is None:
            return WallVerdict(False, "run", f"no output for case {label}")
        if [_sha(x) for x in ins] != info["in_sha_after"]:
            return WallVerdict(False, "inputs_mutated", f"an input buffer changed during the call ({label})")
        unwritten = int((out.view(np.uint32) == SENTINEL).sum())
        if unwritten:
            return WallVerdict(False, "unwritten", f"{unwritten} output elements never written ({label})")
        ref = task.ref64(*ins)
        why = trivial_failure(out, ref, ins)
        if why:
            return WallVerdict(False, "trivial", f"{why} ({label})")
        why = tolerance_failure(task, out, ins, cfg)
        if why:
            replayed = any(outs.get(f"case{j}") is not None and outs[f"case{j}"].shape == out.shape
                           and outs[f"case{j}"].tobytes() == out.tobytes() for j in range(i))
            check = ("caching" if replayed or (label.startswith("probe/") and label != "probe/A") else
                     "shapes" if label.startswith("shape/") else
                     "precision" if label.startswith("precision/") else "tolerance")
            return WallVerdict(False, check, f"{why} ({label})")
        if not info["deterministic"]:
            return WallVerdict(False, "determinism", f"two calls on the same input differ bitwise ({label})")
    tm = meta["timing"][0]
    if tm["nan_in_timed"]:
        return WallVerdict(False, "unwritten", f"{tm['nan_in_timed']} output elements left unwritten in timed calls")
    for q, r in enumerate(tm["timed_sets"]):  # the input set of the last call that wrote buffer q
        out = outs.get(f"timed0_{q}")
        if out is None:
            return WallVerdict(False, "run", "timed outputs missing")
        why = tolerance_failure(task, out, tsets[r], cfg)
        if why:
            return WallVerdict(False, "caching", f"a timed call's output is wrong: {why}")
    return WallVerdict(True)
