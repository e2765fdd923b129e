"""``agentmill kernelpro``: the measured roofline, Stage-1 classification, the micro-profiling tools, the correctness
wall and the search over compiled CPU kernels (E177; docs/methods/kernelpro.md). A thin face over
``agentmill.methods.kernelpro``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXAMPLES = """examples:
  agentmill kernelpro calibrate
  agentmill kernelpro wall --task sum --exploit-suite --backend numba
  agentmill kernelpro optimise sum --budget 12 --algo mcts --out runs/kp-sum
"""


def _ceilings(args: argparse.Namespace):
    from agentmill.methods.kernelpro import roofline

    return roofline.calibrate(threads=(1,), processes=args.processes, which=args.sweep,
                              recalibrate=getattr(args, "recalibrate", False))


def _add_cal(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", default="smoke", choices=("smoke", "quick", "full"),
                   help="bandwidth sweep of the calibration: smoke (4 sizes), quick (one per level + DRAM) or full "
                        "(13 sizes × 4 STREAM kernels); cached per machine fingerprint (default smoke)")
    p.add_argument("--processes", type=int, default=3,
                   help="separate processes each ceiling is measured in (default 3)")


def cmd_calibrate(args: argparse.Namespace) -> int:
    c = _ceilings(args)
    print(f"CPU {c.fingerprint['cpu']}  flags {','.join(c.fingerprint['flags'])}  OpenBLAS core {c.openblas_core}")
    print(f"caches {c.caches}")
    for k, v in sorted(c.peak.items()):
        print(f"  peak {k:12s} {v:8.1f} GFLOP/s  spread {c.peak_spread[k]:.1%}")
    for k, v in sorted(c.bandwidth.items()):
        print(f"  bandwidth {k:8s} {v:8.1f} GB/s     spread {c.bandwidth_spread[k]:.1%}")
    print(f"  sgemm {c.sgemm}  dispatch floor {c.floor_s * 1e6:.2f} µs  {'stable' if c.stable else 'UNSTABLE (>5 %)'}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from agentmill.methods.kernelpro.tasks import TASKS

    for t in TASKS.values():
        s = t.sizes["search"]
        print(f"{t.name:13s} {t.kind:11s} search {str(s):14s} F {t.flops(s):.3g}  Q {t.bytes(s):.3g} B  "
              f"AI {t.ai(s):.3g}  sizes {' '.join(f'{k}={v}' for k, v in t.sizes.items() if k != 'search')}")
    return 0


def cmd_classify(args: argparse.Namespace) -> int:
    from agentmill.methods.kernelpro import roofline
    from agentmill.methods.kernelpro.tasks import get_task, shape_for

    task = get_task(args.task)
    shape = shape_for(task, args.size)
    c = _ceilings(args)
    r = roofline.classify_time(task, shape, roofline.time_reference(task, shape), c)
    print(json.dumps(r.to_dict(), indent=1))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from agentmill.methods.kernelpro import roofline, wall
    from agentmill.methods.kernelpro.feedback import render_feedback
    from agentmill.methods.kernelpro.tables import profile_candidate
    from agentmill.methods.kernelpro.tasks import get_task
    from agentmill.methods.kernelpro.tools import diagnose

    task = get_task(args.task)
    src = Path(args.source).read_text()
    flags = _flags(args)
    c = _ceilings(args)
    ev = wall.evaluate(task, src, flags, ceilings=c, backend=args.backend)
    print(f"wall: {ev.status} {ev.wall.failed_check} {ev.wall.evidence[:300]}")
    if ev.status != "correct":
        return 1
    rep = roofline.classify_time(task, task.sizes["search"], ev.t_ref, c)
    if args.backend == "numba":
        from agentmill.methods.kernelpro import numba_backend

        prof = numba_backend.profile(task.name, ev.asm, flags, ev.t_cand, c)
        print(f"numba compile {ev.compile_s:.2f} s (NUMBA_CPU_NAME={numba_backend.NUMBA_CPU})")
    else:
        prof = profile_candidate(task.name, ev.so_path, flags, ev.t_cand, c)
    fs, skipped = diagnose(prof, rep)
    print(f"speedup vs numpy {ev.speedup:.2f}×")
    print(render_feedback(fs, rep, mode=args.feedback))
    for t, why in skipped.items():
        print(f"  (not run: {t}: {why})")
    return 0


def cmd_wall(args: argparse.Namespace) -> int:
    from agentmill.methods.kernelpro import library, wall
    from agentmill.methods.kernelpro.tasks import get_task

    task = get_task(args.task)
    if args.exploit_suite:
        if args.backend == "numba":
            root = dict(library.numba_points(args.task, "full")[0])
            exploits, expected = library.NUMBA_EXPLOITS, library.NUMBA_EXPECTED_CHECKS
            cands = [library.render_numba(args.task, {**root, "exploit": e}) for e in exploits]
        else:
            root = dict(library.root(args.task, "quick"))
            exploits, expected = library.EXPLOITS, library.EXPECTED_CHECKS
            cands = [library.render(args.task, {**root, "exploit": e}) for e in exploits]
        evs = wall.evaluate_many(task, cands, backend=args.backend)
        bad = 0
        for e, ev in zip(exploits, evs):
            caught = ev.status != "correct" and ev.wall.failed_check in expected[e]
            bad += not caught
            print(f"{e:14s} {'caught' if caught else 'MISSED'} by {ev.wall.failed_check or '-'}: "
                  f"{ev.wall.evidence[:120]}")
        return 1 if bad else 0
    if not args.source:
        raise ValueError("pass --source FILE or --exploit-suite")
    ev = wall.evaluate(task, Path(args.source).read_text(), _flags(args), backend=args.backend)
    print(json.dumps({k: v for k, v in ev.row().items() if k not in ("cand_samples", "ref_samples")}, indent=1))
    return 0 if ev.status == "correct" else 1


def _flags(args: argparse.Namespace) -> tuple[str, ...]:
    if args.flags is None:
        return () if args.backend == "numba" else ("-O3", "-march=x86-64-v3")
    return tuple(args.flags.split())


def _add_backend(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="c", choices=("c", "numba"),
                   help="c: a C source defining void kernel(...), built by gcc; numba: a Python source defining one "
                        "function kernel(...) with the same arguments (flat float32 arrays, then int64 sizes), "
                        "compiled by numba.njit in the sandboxed child (default c)")
    p.add_argument("--flags", default=None,
                   help="C: compiler flags (default -O3 -march=x86-64-v3); numba: 'fastmath' or nothing (default "
                        "nothing)")


def cmd_optimise(args: argparse.Namespace) -> int:
    from agentmill.methods.kernelpro.config import SearchConfig
    from agentmill.methods.kernelpro.core import optimize
    from agentmill.methods.kernelpro.tasks import get_task

    get_task(args.task)
    c = _ceilings(args)
    out = Path(args.out) if args.out else None

    def progress(desc: str, done: float, total: float | None) -> None:
        print(f"\r{desc}: {int(done)}/{int(total or 0)} candidates evaluated", end="", file=sys.stderr, flush=True)

    r = optimize(args.task, algo=args.algo, search=SearchConfig(budget=args.budget, seed=args.seed,
                                                                guided_weight=args.guided_weight),
                 which=args.space, ceilings=c, out_dir=out, progress=progress)
    print(file=sys.stderr)
    best = r.best_remeasured
    summary = {"task": args.task, "algo": args.algo, "budget": args.budget, "stage1": r.report,
               "search_time_best": r.search.best_speedup, "best_params": dict(r.search.best),
               "remeasured": r.remeasured, "reported_speedup_vs_numpy": best["speedup"] if best else None,
               "curve": r.search.curve, "cpu": c.fingerprint["cpu"], "march": "x86-64-v3 (pinned)"}
    print(f"Stage 1: {r.report['cls']} ({r.report['confidence']}), headroom {r.report['headroom']:.1f}×")
    for i, row in enumerate(r.candidates):
        print(f"  {i + 1:3d} {row['status']:13s} {row['speedup']:7.2f}×  {json.dumps(row['params'])}  "
              f"{','.join(row['findings'])}")
    print(f"best (re-measured in a fresh process): {summary['reported_speedup_vs_numpy']}")
    tb = _exhaustive_table(args, c)
    if tb is not None:
        summary["exhaustive"] = _print_against_optimum(tb, best["params"] if best else dict(r.search.best))
    else:
        print("exhaustive optimum: no table of this space is cached for this machine and code; pass --exhaustive to "
              "measure one and compare the returned best with it")
    if out is not None:
        from agentmill.core.records import write_json_atomic

        write_json_atomic(out / "report.json", summary)
        _report_plots(args, r, c, out, tb)
        print(f"report: {out / 'report.json'}, {out / 'roofline.png'}, {out / 'search.png'}")
    return 0


def _exhaustive_table(args: argparse.Namespace, c):
    """The measured table of the searched space: measured now with ``--exhaustive`` (cached afterwards), else the
    cached one if any (None)."""
    from agentmill.methods.kernelpro import tables
    from agentmill.methods.kernelpro.core import cached_table

    if not args.exhaustive:
        return cached_table(args.task, args.space)
    tb = tables.build(args.task, args.space, ceilings=c,
                      progress=lambda d, a, b: print(f"\r{d}: {int(a)}/{int(b or 0)}", end="", file=sys.stderr))
    print(file=sys.stderr)
    return tb


def _print_against_optimum(tb, params: dict) -> dict:
    from agentmill.methods.kernelpro.budget import compare_to_optimum

    cmp = compare_to_optimum(tb, params)
    print(f"exhaustive optimum ({len(tb.rows)} candidates of the {tb.which} space, measured once): "
          f"{cmp['optimum_speedup']:.2f}× vs numpy, {json.dumps(cmp['optimum_params'])}")
    if cmp["within"] is None:
        print(f"returned best {json.dumps(params)} is not in that table: no comparison")
    else:
        verdict = "WITHIN" if cmp["within"] else "NOT within"
        print(f"returned best {json.dumps(params)}: {cmp['table_speedup']:.2f}× in the same table = "
              f"{cmp['fraction_of_optimum']:.1%} of the optimum's speed -> {verdict} 5 % of the exhaustive optimum")
    print("  (both speeds from the table: min of the reference / min of the candidate; the live re-measured "
          "speedup above is a ratio of medians from another process, not on the same scale)")
    return cmp


def _report_plots(args: argparse.Namespace, r, c, out: Path, tb) -> None:
    import numpy as np

    from agentmill.experiments.plotting import pyplot, save
    from agentmill.methods.kernelpro import search
    from agentmill.methods.kernelpro.config import SearchConfig
    from agentmill.methods.kernelpro.tasks import get_task

    plt = pyplot()
    task = get_task(args.task)
    s = task.sizes["search"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ai = np.geomspace(0.01, 100, 100)
    peak = c.p_peak(1)
    for lvl, bw in sorted(c.bandwidth.items()):
        ax.loglog(ai, np.minimum(peak, ai * bw), lw=0.8, label=lvl)
    x = max(task.ai(s), 0.02)
    for row in r.candidates:
        if row["status"] == "correct":
            gf = (task.flops(s) or task.bytes(s) / 8) / row["t_cand"] / 1e9
            ax.scatter([x], [gf], s=10, alpha=0.6)
    ax.set_xlabel("flop/byte")
    ax.set_ylabel("GFLOP/s (bytes/8 for data movement)")
    ax.legend(fontsize=6)
    ax.set_title(f"{args.task}: every correct candidate on the measured roofline", fontsize=8)
    fig.tight_layout()
    save(fig, out / "roofline.png")
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.plot(range(1, len(r.search.curve) + 1), r.search.curve, label=f"{args.algo} (live)")
    if tb is not None:
        cfg = SearchConfig(budget=args.budget)
        for algo in ("greedy", "mcts"):
            curves = [search.run_algo(algo, args.task, tb.outcome, SearchConfig(budget=args.budget, seed=k),
                                      which=args.space, s_cap=tb.meta["s_cap"]).curve for k in range(10)]
            ax.plot(range(1, cfg.budget + 1), np.nanmean(np.array(curves, float), axis=0), ls=":",
                    label=f"{algo} (replay, 10 seeds)")
        ax.axhline(tb.optimum(), color="k", ls="--", lw=0.8, label="exhaustive optimum")
    else:
        ax.set_title("(no exhaustive table cached: pass --exhaustive to measure one)", fontsize=7)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best speedup vs numpy")
    ax.legend(fontsize=6)
    fig.tight_layout()
    save(fig, out / "search.png")


def cmd_exhaustive(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.kernelpro import tables

    c = _ceilings(args)
    tb = tables.build(args.task, args.space, ceilings=c,
                      progress=lambda d, a, b: print(f"\r{d}: {int(a)}/{int(b or 0)}", end="", file=sys.stderr))
    print(file=sys.stderr)
    write_json_atomic(args.out, {"task": tb.task, "space": tb.which, "meta": tb.meta, "rows": list(tb.rows.values())})
    print(f"{len(tb.rows)} candidates; optimum {tb.optimum():.2f}× vs numpy; written to {args.out}")
    return 0


def cmd_cuda_static(args: argparse.Namespace) -> int:
    from agentmill.methods.kernelpro import cuda

    src = Path(args.source).read_text()
    cubin, infos, _ = cuda.compile_cuda(src, args.arch)
    hist = cuda.sass(cubin)
    for name, info in infos.items():
        f = cuda.static_findings(name, info, hist.get(name, {}), matmul_like=args.matmul_like,
                                 contiguous=args.contiguous, threads_per_block=args.threads, arch=args.arch)
        occ, blocks, lim = cuda.occupancy(info.registers, args.threads, info.smem_bytes, args.arch)
        print(json.dumps({"kernel": name, "ptxas": info.__dict__, "occupancy": occ, "blocks_per_sm": blocks,
                          "limiter": lim, "findings": f, "sass_top": dict(hist.get(name, {}).most_common(10))},
                         indent=1))
    return 0


def register(sub) -> None:
    sp = sub.add_parser("kernelpro", help="roofline, micro-profiling tools, correctness wall and MCTS over compiled "
                                          "CPU kernels (E177)",
                        description="KernelPro: measure this machine's roofline, classify a kernel's bottleneck, "
                                    "diagnose it with\ndeterministic tools, check it behind a correctness wall, and "
                                    "search a transformation library.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="kernelpro_cmd", required=True,
                           help="the subcommand ('agentmill kernelpro SUBCOMMAND -h' shows its flags)")
    p = ps.add_parser("calibrate", help="measure (or load the cached) ceilings and print the roofline table")
    _add_cal(p)
    p.add_argument("--recalibrate", action="store_true", help="measure again even when a cached calibration exists")
    p.set_defaults(fn=cmd_calibrate)
    p = ps.add_parser("tasks", help="the task suite with flops, bytes, intensity and sizes")
    p.set_defaults(fn=cmd_tasks)
    p = ps.add_parser("classify", help="Stage-1 bottleneck class of a task's numpy reference")
    p.add_argument("--task", required=True, help="task name (see 'agentmill kernelpro tasks')")
    p.add_argument("--size", default="search", choices=("S", "M", "L", "XL", "search"),
                   help="size regime (default search)")
    _add_cal(p)
    p.set_defaults(fn=cmd_classify)
    p = ps.add_parser("diagnose", help="wall-check, time and diagnose a C or numba kernel with the tools")
    p.add_argument("--task", required=True, help="task whose signature the kernel implements")
    p.add_argument("--source", required=True, help="source file: C defining void kernel(...), or Python defining "
                                                  "kernel(...) with --backend numba")
    _add_backend(p)
    p.add_argument("--feedback", default="diagnoses", choices=("diagnoses", "raw", "both"),
                   help="rendering of the findings (default diagnoses)")
    _add_cal(p)
    p.set_defaults(fn=cmd_diagnose)
    p = ps.add_parser("wall", help="run the correctness wall on a kernel, or the planted exploit suite")
    p.add_argument("--task", required=True, help="task whose signature the kernel implements")
    p.add_argument("--source", default=None, help="source file to check (C, or Python with --backend numba)")
    _add_backend(p)
    p.add_argument("--exploit-suite", action="store_true", help="plant every known reward hack and show which check "
                                                                "catches each")
    p.set_defaults(fn=cmd_wall)
    for name in ("optimise", "search"):
        p = ps.add_parser(name, help="search the transformation library live (compile, wall, time, diagnose each "
                                     "candidate) and report the re-measured best" + (" (alias of optimise)"
                                                                                      if name == "search" else ""))
        p.add_argument("task", help="task to optimise (sum, transpose, softmax_rows, layernorm, vadd)")
        p.add_argument("--algo", default="mcts", choices=("mcts", "greedy", "random"), help="search (default mcts)")
        p.add_argument("--budget", type=int, default=12, help="evaluations (default 12)")
        p.add_argument("--space", default="quick", choices=("smoke", "quick", "full"),
                       help="move space of the library (default quick)")
        p.add_argument("--guided-weight", type=float, default=4.0,
                       help="proposer weight of tool-recommended actions; 0 = unguided (default 4)")
        p.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
        p.add_argument("--exhaustive", action="store_true",
                       help="also measure the whole space if it is not cached, and report whether the returned best "
                            "is within 5 %% of its exhaustive optimum (with both speeds) and draw the optimum line")
        p.add_argument("--out", default=None, help="directory for candidates.jsonl (resume), report.json and plots")
        _add_cal(p)
        p.set_defaults(fn=cmd_optimise)
    p = ps.add_parser("exhaustive", help="measure every candidate of a task's move space (ground truth table)")
    p.add_argument("--task", required=True, help="task name")
    p.add_argument("--space", default="quick", choices=("smoke", "quick", "full"), help="move space (default quick)")
    p.add_argument("--out", required=True, help="JSON file for the table")
    _add_cal(p)
    p.set_defaults(fn=cmd_exhaustive)
    p = ps.add_parser("cuda-static", help="compile a CUDA source (no GPU needed): ptxas report, SASS histogram, "
                                          "occupancy and the static GPU tools")
    p.add_argument("--source", required=True, help="CUDA source with extern \"C\" __global__ kernels")
    p.add_argument("--arch", default="sm_90", choices=("sm_80", "sm_90"), help="target architecture (default sm_90)")
    p.add_argument("--threads", type=int, default=256, help="threads per block for the occupancy (default 256)")
    p.add_argument("--matmul-like", action="store_true", help="the kernel is matmul-like (tensor-core and tiling "
                                                              "checks apply)")
    p.add_argument("--contiguous", action="store_true", help="the kernel reads contiguous fp32 data (vector-load "
                                                             "check applies)")
    p.set_defaults(fn=cmd_cuda_static)
