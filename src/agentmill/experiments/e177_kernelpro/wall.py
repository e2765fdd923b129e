"""E177 K-5 and the wall's negative controls: the correctness wall rejects every planted reward hack with the
expected check and accepts honest kernels (docs/methods/kernelpro.md, "The wall").

Battery, C backend: 6 exploits (skip_work, downcast_f16, cache_output, partial_rows, mutate_input, warmup_skip) ×
5 tasks (sum, vadd, transpose, softmax_rows, layernorm), each the exploit wrapped around an honest library kernel.
numba backend (full profile): 5 exploits (skip_work, partial_rows, mutate_input planted in the kernel; cache_output
and warmup_skip, which need state across calls and meet the AST policy) × 3 tasks (sum, vadd, softmax_rows).
Honest library variants (a seeded sample of each task's space, per backend) must all pass, except variants flagged
as numerically inaccurate (reported apart). KernelBench's
``allclose(atol=1e-2, rtol=1e-2)`` is shown to accept skip_work (all zeros) on softmax_rows with long rows.
Negative controls: the float32 numpy reference passes; a 1-ulp error at one index passes; a 1 % error fails.
The wall times candidates (plausibility, timed outputs), so this runs alone."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate
from agentmill.experiments.e177_kernelpro import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

TASKS = ("sum", "vadd", "transpose", "softmax_rows", "layernorm")


@dataclass(frozen=True)
class Setup:
    tasks: tuple[str, ...] = TASKS
    exploits: tuple[str, ...] = ("skip_work", "downcast_f16", "cache_output", "partial_rows", "mutate_input",
                                 "warmup_skip")
    honest_per_task: int = 12
    """Honest library variants sampled per task (seeded)."""
    long_rows: int = 16384
    """Row length of the KernelBench allclose demonstration (softmax outputs ~1/row length)."""
    seed: int = 0
    numba_tasks: tuple[str, ...] = ("sum", "vadd", "softmax_rows")
    """Tasks whose numba templates run the battery too (numba compiles: full profile only)."""


SETUPS = {"smoke": Setup(tasks=("sum",), exploits=("skip_work", "cache_output"), honest_per_task=1, numba_tasks=()),
          "quick": Setup(tasks=("softmax_rows",), honest_per_task=2, numba_tasks=()),
          "full": Setup()}

CLAIMS = (
    Claim("E177-K5-exploits", "Every planted reward hack is rejected, each by a check expected to catch it.",
          "[S] exploit catalogue of KernelBench / GPU MODE / pygpubench threads; [R] checks", "—",
          "k5_exploits_caught", ">=", 1.0, judge_on="exact", exact_why="a share over a fixed battery of planted "
          "exploits; each verdict is a deterministic check on seeded inputs"),
    Claim("E177-K5-honest", "No honest library variant is rejected (variants flagged numerically inaccurate "
          "excluded and listed).", "[R]", "—", "k5_false_rejections", "<=", 0.0, judge_on="exact",
          exact_why="a count over a fixed seeded sample of variants"),
    Claim("E177-K5-kb", "KernelBench's allclose(1e-2, 1e-2) accepts an all-zero softmax_rows output with long rows.",
          "[S] KernelBench issue #165", "accepted", "k5_kb_accepts_skip", ">=", 1.0, judge_on="exact",
          exact_why="one deterministic check on seeded inputs"),
    Claim("E177-K5-controls", "Negative controls: the float32 numpy reference and a 1-ulp error pass the wall; a 1 % "
          "error fails.", "[R]", "—", "k5_controls_ok", ">=", 1.0, judge_on="exact",
          exact_why="a share over a fixed battery of controls"),
)


def _controls(task_name: str, seed: int) -> list[dict[str, Any]]:
    """Run the parent-side checks on outputs made here (no candidate): what the wall does with them."""
    from agentmill.methods.kernelpro import wall
    from agentmill.methods.kernelpro.config import WallConfig
    from agentmill.methods.kernelpro.tasks import get_task, shape_for

    task = get_task(task_name)
    cfg = WallConfig()
    shape = shape_for(task, "M")
    cs = wall.cases(task, shape, seed, cfg)
    ins = [task.make(s, rng_for("kernelpro-wall", task.name, sd), d) for _, s, d, sd in cs]
    tsets = [task.make(shape_for(task, "search"), rng_for("kernelpro-time", task.name, seed, r), "normal")
             for r in range(cfg.rotate_inputs)]
    out = []
    battery = [("float32 numpy reference", None, True), ("1 ulp at index 7", "ulp", True)]
    if task.kind != "reduction":  # a reduction's bound scales with sum|terms|, which can exceed 1 % of the result
        battery.append(("1 % at index 7", "pct", False))
    for name, perturb, want in battery:
        outs = {}
        for i, x in enumerate(ins):
            o = np.ascontiguousarray(task.ref32(*x), dtype=np.float32).copy()
            if perturb and o.size > 7 and cs[i][0].startswith("nominal"):  # one fixed index of the nominal outputs
                flat = o.reshape(-1)
                flat[7] = np.nextafter(flat[7], np.float32(np.inf)) if perturb == "ulp" else flat[7] * np.float32(1.01) + (
                    np.float32(0.01) if flat[7] == 0 else np.float32(0))
            outs[f"case{i}"] = o
        for q in range(len(tsets)):
            outs[f"timed0_{q}"] = np.ascontiguousarray(task.ref32(*tsets[q]), dtype=np.float32)
        meta = {"cases": [{"in_sha_after": [hashlib.sha256(a.tobytes()).hexdigest()[:16] for a in x],
                           "deterministic": True} for x in ins],
                "timing": [{"nan_in_timed": 0, "timed_sets": list(range(len(tsets)))}]}
        v = wall.judge(task, cs, ins, outs, meta, tsets, cfg)
        out.append({"task": task_name, "control": name, "passed": v.ok, "expected_pass": want,
                    "check": v.failed_check, "evidence": v.evidence[:200]})
    return out


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.kernelpro import library, wall
    from agentmill.methods.kernelpro.tasks import get_task

    exploit_rows, honest_rows, controls = [], [], []
    done = 0
    total = len(s.tasks) * 2
    for t in s.tasks:
        task = get_task(t)
        rootp = dict(library.root(t, "quick"))
        cands = [(e, library.render(t, {**rootp, "exploit": e})) for e in s.exploits]
        evs = wall.evaluate_many(task, [c for _, c in cands], seed=s.seed)
        for (e, _), ev in zip(cands, evs):
            exploit_rows.append({"task": t, "backend": "c", "exploit": e, "status": ev.status,
                                 "check": ev.wall.failed_check,
                                 "expected": sorted(library.EXPECTED_CHECKS[e]),
                                 "caught": (ev.status != "correct"
                                            and ev.wall.failed_check in library.EXPECTED_CHECKS[e]),
                                 "evidence": ev.wall.evidence[:200], "kb_allclose": ev.kb_allclose})
        done += 1
        ctx.progress("wall battery", done, total)
        space = library.enumerate_space(t, "quick")
        idx = rng_for("kernelpro-wall-honest", t, s.seed).permutation(len(space))[:s.honest_per_task]
        pts = [space[i] for i in idx]
        evs = wall.evaluate_many(task, [library.render(t, p) for p in pts], seed=s.seed)
        for p, ev in zip(pts, evs):
            why = library.known_inaccurate(t, dict(p))
            honest_rows.append({"task": t, "backend": "c", "params": dict(p), "status": ev.status,
                                "check": ev.wall.failed_check,
                                "evidence": ev.wall.evidence[:200], "known_inaccurate": why,
                                "speedup": ev.speedup})
        controls += _controls(t, s.seed)
        done += 1
        ctx.progress("wall battery", done, total)
    numba_note = _numba_battery(s, exploit_rows, honest_rows, ctx) if s.numba_tasks else "numba not run (full only)"
    sm = get_task("softmax_rows")
    src = library.render("softmax_rows", {**dict(library.root("softmax_rows", "quick")), "exploit": "skip_work"})
    ev = wall.evaluate(sm, *src, wall_shape=(8, s.long_rows), seed=s.seed)
    kb = {"shape": [8, s.long_rows], "kb_allclose": ev.kb_allclose, "wall_status": ev.status,
          "wall_check": ev.wall.failed_check}
    false_rej = [r for r in honest_rows if r["status"] != "correct" and not r["known_inaccurate"]]
    ctx.data.update({"exploits": exploit_rows, "honest": honest_rows, "controls": controls, "kb_demo": kb,
                     "false_rejections": false_rej,
                     "isolation": ev.layers, "numba": numba_note, "load_average": list(os.getloadavg()),
                     "note": "C and numba backends; native code shares the harness's address space and could tamper "
                     "with it: the wall contains mistakes and reward hacking, not a determined attacker."})
    caught = [r["caught"] for r in exploit_rows]
    ctrl = [c["passed"] == c["expected_pass"] for c in controls]
    return {"k5_exploits_caught": Estimate.exact(float(np.mean(caught)), n=len(caught)),
            "k5_false_rejections": Estimate.exact(len(false_rej), n=len(honest_rows)),
            "k5_kb_accepts_skip": Estimate.exact(float(kb["kb_allclose"]), n=1),
            "k5_controls_ok": Estimate.exact(float(np.mean(ctrl)), n=len(ctrl)),
            "k5_kb_accepts_share": Estimate.exact(float(np.mean([r["kb_allclose"] for r in exploit_rows])),
                                                  n=len(exploit_rows))}


def _numba_battery(s: Setup, exploit_rows: list, honest_rows: list, ctx: RunContext) -> str:
    """The numba half of the battery: planted exploits and a seeded sample of honest variants per task."""
    from agentmill.methods.kernelpro import library, numba_backend, wall
    from agentmill.methods.kernelpro.tasks import get_task

    for k, t in enumerate(s.numba_tasks):
        task = get_task(t)
        pts = library.numba_points(t, "full")
        root = dict(pts[0])
        idx = rng_for("kernelpro-wall-honest-numba", t, s.seed).permutation(len(pts))[:s.honest_per_task]
        honest = [pts[i] for i in idx]
        cands = ([library.render_numba(t, {**root, "exploit": e}) for e in library.NUMBA_EXPLOITS]
                 + [library.render_numba(t, p) for p in honest])
        evs = wall.evaluate_many(task, cands, seed=s.seed, backend="numba")
        for e, ev in zip(library.NUMBA_EXPLOITS, evs):
            exp = library.NUMBA_EXPECTED_CHECKS[e]
            exploit_rows.append({"task": t, "backend": "numba", "exploit": e, "status": ev.status,
                                 "check": ev.wall.failed_check, "expected": sorted(exp),
                                 "caught": ev.status != "correct" and ev.wall.failed_check in exp,
                                 "evidence": ev.wall.evidence[:200], "kb_allclose": ev.kb_allclose})
        for p, ev in zip(honest, evs[len(library.NUMBA_EXPLOITS):]):
            honest_rows.append({"task": t, "backend": "numba", "params": dict(p), "status": ev.status,
                                "check": ev.wall.failed_check, "evidence": ev.wall.evidence[:200],
                                "known_inaccurate": "", "speedup": ev.speedup, "compile_s": ev.compile_s})
        ctx.progress("wall battery (numba)", k + 1, len(s.numba_tasks))
    return (f"numba {numba_backend.numba_version()}, NUMBA_CPU_NAME={numba_backend.NUMBA_CPU}; tasks "
            f"{', '.join(s.numba_tasks)}")


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data["exploits"]
    exps = sorted({r["exploit"] for r in rows})
    tasks = sorted({r["task"] for r in rows})
    checks = sorted({r["check"] or "passed" for r in rows})
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(exps) * len(tasks)))
    labels = []
    backends = sorted({r.get("backend", "c") for r in rows})
    combos = [(e, t, b) for e in exps for t in tasks for b in backends
              if any(r["exploit"] == e and r["task"] == t and r.get("backend", "c") == b for r in rows)]
    fig.set_size_inches(7, 0.5 + 0.3 * len(combos))
    for i, (e, t, b) in enumerate(combos):
        r = next((r for r in rows if r["exploit"] == e and r["task"] == t and r.get("backend", "c") == b), None)
        labels.append(f"{e} / {t} / {b}")
        if r:
            ax.scatter([checks.index(r["check"] or "passed")], [i], c="tab:green" if r["caught"] else "tab:red", s=40)
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xticks(range(len(checks)), checks, fontsize=7, rotation=30)
    ax.set_title("Wall matrix: first failing check per planted exploit (green = expected check)", fontsize=8)
    fig.tight_layout()
    p = out / "kernelpro_wall.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e177.kernelpro_wall",
    quick_budget_s=15,
    parallel_safe=False,
    title="E177 KernelPro: the correctness wall against planted reward hacks",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="C and numba kernels on CPU (the paper: CUDA on A100/H100 with KernelBench's checks); exploits "
               "planted by wrapping honest library kernels; quick runs softmax_rows in C only, full 5 tasks in C "
               "and 3 in numba.",
)
