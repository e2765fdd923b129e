"""``agentmill autocog``: run, resume and audit the AutoCog loop; recovery grid; battery; participant web app;
human-data fixture (docs/methods/autocog.md).

    agentmill autocog run --run-dir D --roles search|llm [--lm SPEC] --cohort simulated --gt ttb --eps 0.25
                          [--rounds 5] [--seed 0] [--gate welch|power|jsd_static|jsd_sequence]
    agentmill autocog run --run-dir D --cohort human --db study.sqlite [--config study.yaml] [--task binary|cardinal]
    agentmill autocog resume D [--force-config] | status D | leaderboard D [--prospective] | audit D
    agentmill autocog theory check FILE | theory check --library NAME [--rating-max 5]
    agentmill autocog recover --grid smoke|quick|full --out D [--workers 2]
    agentmill autocog battery build|check [--out battery.json]
    agentmill autocog serve --db study.sqlite [--study study.yaml] [--host 127.0.0.1 --port 8765] [--test-mode]
    agentmill autocog sessions create --db study.sqlite --obs OBS --n 30
    agentmill autocog export --db study.sqlite --format csv|jsonl --out D [--include-excluded] [--include-raw-pids]
    agentmill autocog fixture verify DIR | fixture replay DIR --run binary|cardinal
    agentmill autocog sandbox-check

Bad input exits 2 with one line on stderr and writes nothing; a failed check (audit, fixture) exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GTS = ("ttb", "tallying", "wadd", "dial3", "drwadd")
HUMAN_TASKS = {"binary": (1, ("ttb", "wadd")), "cardinal": (5, ("ttb", "tallying"))}
"""Human runs: rating scale R and the two seed theories of the paper's human runs ([D] result folders
``human_decision_making_binary/ttb+wadd`` and ``human_decision_making_cardinal/ttb+tallying``)."""


def _fail(msg: str) -> int:
    print(msg, file=sys.stderr)
    return 2


def _build_loop(a: dict, run_dir: Path):
    from agentmill.methods.autocog import library as L
    from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
    from agentmill.methods.autocog.cohorts import SimulatedCohort
    from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
    from agentmill.methods.autocog.recovery import GROUND_TRUTHS, battery_exclusions, load_batteries

    human = a.get("cohort", "simulated") == "human"
    if human:
        rating_max, seed_keys = HUMAN_TASKS[a["task"]]
        seeds = tuple(L.REGISTRY[k]() for k in seed_keys)
        n_real = a["study"]["target_valid_n"]
    else:
        gt = GROUND_TRUTHS[a["gt"]]
        rating_max, seeds, n_real = gt.rating_max, gt.seed_theories(), 25
    bat = load_batteries()[rating_max]
    adv = tuple(SearchAdvocate(n_designs=a["n_designs"], n_real=n_real, rating_max=rating_max) for _ in range(2))
    arb, rev = RuleArbiter(), ProgramSpaceReviser(max_candidates=a["max_candidates"])
    if a["roles"] == "llm":
        from agentmill.lm import load_lm
        from agentmill.methods.autocog.agents.llm import LLMAdvocate, LLMArbiter, LLMReviser

        lm = load_lm(a["lm"])
        adv = tuple(LLMAdvocate(lm, fallback=x, run_dir=run_dir, name=f"advocate{k + 1}") for k, x in enumerate(adv))
        arb, rev = LLMArbiter(lm, fallback=arb, run_dir=run_dir), LLMReviser(lm, fallback=rev, run_dir=run_dir)
    if human:
        from agentmill.methods.autocog.web.store import Store
        from agentmill.methods.autocog.web.study import StudyCohort

        cohort = StudyCohort(Store(a["db"]), a["study"])
    else:
        cohort = SimulatedCohort(gt.theory(), action_noise=a["eps"], seed=a["seed"])
    # "gate" is in the arguments only when not Welch, so default runs keep their cli_args.json and ledgered config
    return AutoCogLoop(LoopConfig(n_rounds=a["rounds"], n_real=n_real, seed=a["seed"], validation_round=True,
                                  gate=a.get("gate", "welch")),
                       seeds=seeds, advocates=adv, arbiter=arb, reviser=rev, cohort=cohort,
                       run_dir=run_dir, exclude_pairs=battery_exclusions(bat), force_config=a.get("force", False))


def _print_result(res, loop) -> None:
    print(f"status {res.status}  observations {res.n_obs}  gate pass rate {res.gate_pass_rate:.2f}")
    for name, score, _ in res.leaderboard:
        print(f"  {score:6.3f}  {name}")
    print(f"surfaced: {res.surfaced}")
    print(f"ledger head {res.ledger_head}")
    if res.status == "awaiting_data":
        db = loop.cohort.store.path
        for o in loop.obs[-2:]:
            print(f"awaiting data for {o['obs_id']}: agentmill autocog sessions create --db {db} --obs {o['obs_id']} "
                  f"--n N  (then: agentmill autocog resume {loop.run_dir})")


def _run_loop(a: dict, run_dir: Path) -> int:
    loop = _build_loop(a, run_dir)
    if loop.ledger.repaired:
        print(f"ledger repaired: {loop.ledger.repaired}")
    try:
        res = loop.run()
    except ValueError as e:  # e.g. a config different from the ledgered one
        return _fail(str(e))
    _print_result(res, loop)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.loop import GATES

    if args.roles == "llm" and not args.lm:
        return _fail("--roles llm needs --lm (e.g. openai:MODEL@http://127.0.0.1:8000/v1); use --roles search to "
                     "run offline")
    if args.rounds < 1:
        return _fail(f"--rounds must be >= 1, got {args.rounds}")
    if args.gate not in GATES:
        return _fail(f"--gate must be one of {', '.join(GATES)}, got {args.gate!r}")
    a = {"roles": args.roles, "lm": args.lm, "rounds": args.rounds, "seed": args.seed,
         "n_designs": args.n_designs, "max_candidates": args.max_candidates}
    if args.gate != "welch":
        a["gate"] = args.gate
    if args.cohort == "simulated":
        if args.db or args.config:
            return _fail("--db and --config (the study YAML) apply to --cohort human only")
        if args.gt not in GTS:
            return _fail(f"--gt must be one of {', '.join(GTS)}")
        if not 0.0 <= args.eps <= 1.0:
            return _fail(f"--eps must be in [0, 1], got {args.eps}")
        a.update(gt=args.gt, eps=args.eps)
    else:
        from agentmill.methods.autocog.web.app import load_study_or_pinned
        from agentmill.methods.autocog.web.study import validate_study

        if not args.db:
            return _fail("--cohort human needs --db study.sqlite (the participant app's database)")
        if not Path(args.db).parent.is_dir():
            return _fail(f"--db {args.db}: directory {Path(args.db).parent} does not exist")
        try:
            study = load_study_or_pinned(args.db, args.config) or validate_study({})
        except ValueError as e:
            return _fail(str(e))
        a.update(cohort="human", db=str(Path(args.db).resolve()), task=args.task, study=study)
    run_dir = Path(args.run_dir)
    p = run_dir / "cli_args.json"
    if p.exists() and (old := json.loads(p.read_text())) != a:
        diff = sorted(k for k in old.keys() | a.keys() if old.get(k) != a.get(k))
        return _fail(f"{run_dir} holds a run with different arguments ({', '.join(diff)}); use "
                     f"'agentmill autocog resume {run_dir}'")
    run_dir.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(a, sort_keys=True))
    if a.get("cohort") == "human":
        from agentmill.methods.autocog.web.store import Store

        Store(a["db"]).pin_study(a["study"])  # checked above: same config or none pinned yet
    return _run_loop(a, run_dir)


def cmd_resume(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    p = run_dir / "cli_args.json"
    if not p.exists():
        return _fail(f"{run_dir}: no run here (cli_args.json missing)")
    a = json.loads(p.read_text())
    a["force"] = args.force_config
    return _run_loop(a, run_dir)


def cmd_status(args: argparse.Namespace) -> int:
    p = Path(args.run_dir) / "state.json"
    if not p.exists():
        print(f"{args.run_dir}: no state.json", file=sys.stderr)
        return 2
    st = json.loads(p.read_text())
    print(f"status {st['status']}  events {st['n_events']}  observations {len(st['observations'])}  "
          f"theories {len(st['theories'])}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    """The run's current leaderboard (all data so far); with ``--prospective`` each theory's prospective score beside
    it: the same rule on the observations collected after its admission only (post-admit scores are in-sample
    for a revised theory). Both come from ``state.json`` as the loop wrote them."""
    p = Path(args.run_dir) / "state.json"
    if not p.exists():
        print(f"{args.run_dir}: no state.json", file=sys.stderr)
        return 2
    st = json.loads(p.read_text())
    if args.prospective:
        if "prospective" not in st:
            return _fail(f"{p}: no prospective scores (written before they existed); 'agentmill autocog resume "
                         f"{args.run_dir}' rewrites it")
        print(" score  prospective  theory")
    for tid, score in st["leaderboard"]:
        th, raw = st["theories"][tid], st["raw_errors"].get(tid, float("nan"))
        if not args.prospective:
            print(f"{score:6.3f}  {th['name']}  (raw mean |p-r| {raw:.3f})")
            continue
        ps = st["prospective"].get(th["name"])
        print(f"{score:6.3f}  {'—' if ps is None else f'{ps:.3f}':>11}  {th['name']}  (admitted round "
              f"{th['admitted_round']}; raw mean |p-r| {raw:.3f})")
    if args.prospective:
        print("prospective: scored only on observations collected after the theory's admission "
              "(— when there are none)")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.audit import audit

    problems = audit(Path(args.run_dir))
    for p in problems:
        print(f"FAIL {p}")
    if not problems:
        print("ok: hash chain, blobs, required kinds and state.json verified")
    return 1 if problems else 0


def cmd_battery(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.recovery import BATTERY_PATH, battery_sha, build_battery, load_batteries

    if args.action == "build":
        out = {}
        for R in (1, 5):
            b = build_battery(R)
            b["sha256"] = battery_sha(b)
            out[str(R)] = b
            print(f"R={R}: max r {b['check']['max_r']:.3f} (bound {b['check']['bound']}) "
                  f"{'passed' if b['check']['passed'] else 'NOT REACHED'}")
        Path(args.out or BATTERY_PATH).write_text(json.dumps(out, indent=1))
        return 0
    for R, b in load_batteries().items():
        print(f"R={R}: sha256 {b['sha256'][:16]}  max r {b['check']['max_r']:.3f} "
              f"{'passed' if b['check']['passed'] else 'NOT REACHED'}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.web.app import serve

    return serve(db=args.db, study=args.study, host=args.host, port=args.port, test_mode=args.test_mode)


def cmd_sessions(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.web.store import Store

    if not Path(args.db).is_file():
        return _fail(f"--db {args.db}: no such study database")
    try:
        toks = Store(args.db).create_sessions(args.obs, args.n)
    except (KeyError, ValueError) as e:  # unknown observation, n < 1, beyond max_recruit
        return _fail(str(e).strip("'\""))
    for tok in toks:
        print(f"{args.base_url.rstrip('/')}/s/{tok}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.web.export import export
    from agentmill.methods.autocog.web.store import Store

    if not Path(args.db).is_file():
        return _fail(f"--db {args.db}: no such study database")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        return _fail(f"--out {args.out} exists and is not a directory")
    paths = export(Store(args.db), Path(args.out), fmt=args.format, include_excluded=args.include_excluded,
                   include_raw_pids=args.include_raw_pids)
    for p in paths:
        print(p)
    return 0


def _recover_one(item: tuple) -> dict:
    """One AC-7 grid run (module level so a process pool can pickle it); resumes from its ledger if killed."""
    from agentmill.core.records import write_bytes_atomic
    from agentmill.methods.autocog.config import AutoCogConfig
    from agentmill.methods.autocog.recovery import run_recovery

    s, gt, eps, seed, run_dir = item
    done = Path(run_dir) / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    cfg = AutoCogConfig(n_rounds=s.n_rounds, n_designs=s.n_designs, max_candidates=s.max_candidates,
                        rescore_n=s.rescore_n)
    m = run_recovery(gt, eps, seed, Path(run_dir), cfg=cfg)
    m = {k: v for k, v in m.items() if k != "history"}
    write_bytes_atomic(done, json.dumps(m, sort_keys=True, default=str).encode())
    return m


def cmd_recover(args: argparse.Namespace) -> int:
    """The AC-7 grid of ``e176.recovery`` (GT × ε_gt × seeds; its profile's budgets), one run directory per cell
    and seed (keyed by the battery hash, so a rebuilt battery never meets an old ledger), skipped when its result
    exists. The pass rules are the experiment's own (``methods.autocog.recovery.run_passes``, ``cell_passes``)."""
    from agentmill.experiments import get
    from agentmill.methods.autocog.recovery import GROUND_TRUTHS, cell_passes, load_batteries, run_passes

    if args.workers < 1:
        return _fail(f"--workers must be >= 1, got {args.workers}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _fail(f"--out {out} exists and is not a directory")
    s, bats = get("e176.recovery").setup_for(args.grid), load_batteries()
    items = [(s, gt, eps, seed, str(out / args.grid / f"{gt}_eps{eps}_s{seed}_"
                                    f"{bats[GROUND_TRUTHS[gt].rating_max]['sha256'][:8]}"))
             for gt in s.gts for eps in s.noise for seed in range(s.seeds)]
    out.mkdir(parents=True, exist_ok=True)
    if args.workers == 1:
        results = []
        for it in items:
            results.append(_recover_one(it))
            r = results[-1]
            print(f"{r['gt']:9s} eps {r['eps']:.2f} seed {r['seed']}  r {r['r']:.3f}  dr {r['delta_r']:+.3f}  "
                  f"{'pass' if run_passes(r) else 'fail'}  ({len(results)}/{len(items)})", flush=True)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.workers) as ex:
            results = list(ex.map(_recover_one, items))
    cells: dict[str, list[dict]] = {}
    for r in results:
        cells.setdefault(f"{r['gt']}@{r['eps']}", []).append(r)
    cell_pass = {k: cell_passes(rs) for k, rs in cells.items()}
    for k, ok in cell_pass.items():
        print(f"cell {k:16s} {sum(map(run_passes, cells[k]))}/{len(cells[k])} seeds pass -> {'PASS' if ok else 'fail'}")
    print(f"cells passing: {sum(cell_pass.values())}/{len(cell_pass)}")
    (out / args.grid / "summary.json").write_text(json.dumps({"grid": args.grid, "cell_pass": cell_pass,
                                                             "runs": results}, indent=1, default=str))
    return 0


def cmd_fixture(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog import fixtures

    try:
        if args.action == "verify":
            problems = fixtures.verify_fixture(Path(args.dir))
            for p in problems:
                print(f"FAIL {p}")
            if not problems:
                print(f"ok: {len(fixtures.load_manifest(Path(args.dir))['files'])} files match the manifest")
            return 1 if problems else 0
        if not args.run:
            return _fail("fixture replay needs --run binary|cardinal")
        r = fixtures.replay_scores(Path(args.dir), args.run)
    except ValueError as e:
        return _fail(str(e))
    print(f"{r['run']}: {r['n_obs']} observations, {r['rows']} rows, {r['participants']} participants "
          f"in {r['files']} data files")
    for label, score in r["leaderboard"]:
        exp = r["expected"].get(label)
        print(f"  {label:8s} ours {score:.3f}  authors {'—' if exp is None else f'{exp:.3f}'}")
    if r["label_mismatch"]:
        print(f"FAIL theory labels differ: {', '.join(r['label_mismatch'])}")
    print(f"max |diff| {r['max_abs_diff']:.4f} -> {'ok' if r['passed'] else 'FAIL'} (tolerance "
          f"{fixtures.TOLERANCE})")
    return 0 if r["passed"] else 1


def _load_theory_file(path: Path) -> tuple:
    """(theory, declared property names) from a JSON or YAML theory recipe: the ``spec`` mapping the loop ledgers
    (``state.json`` → theories → spec: ``factory`` = a library rule, ``program`` or ``code``), plus an optional
    ``properties`` list the theory declares. ValueError (one line) on anything else."""
    from agentmill.methods.autocog.library import theory_from_spec
    from agentmill.methods.autocog.properties import PROPERTIES

    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            spec = yaml.safe_load(text)
        else:
            spec = json.loads(text)
    except Exception as e:  # yaml.YAMLError or json.JSONDecodeError: report the parser's first line only
        raise ValueError(f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'JSON'} "
                         f"({str(e).splitlines()[0]})") from None
    if not isinstance(spec, dict) or "factory" not in spec:
        raise ValueError(f"{path}: needs a mapping with 'factory' (a library rule name, 'program' or 'code'), as in "
                         "state.json's theories[...].spec")
    spec = dict(spec)
    declared = spec.pop("properties", [])
    if not isinstance(declared, list) or any(d not in PROPERTIES for d in declared):
        raise ValueError(f"{path}: 'properties' must be a list drawn from {', '.join(PROPERTIES)}, got {declared!r}")
    try:
        return theory_from_spec(spec), tuple(declared)
    except KeyError as e:
        raise ValueError(f"{path}: unknown factory or missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def cmd_theory(args: argparse.Namespace) -> int:
    """Pitfall 20: check every declarable property of one theory (a recipe file or a built-in rule) and print each
    as holds or fails with its first counterexample. Declared properties are marked; the exit code is 0 either way
    (the report is the result)."""
    from agentmill.methods.autocog.library import REGISTRY
    from agentmill.methods.autocog.properties import DECLARED, PROPERTIES, check_properties
    from agentmill.methods.autocog.sandbox import SandboxError

    if (args.file is None) == (args.library is None):
        return _fail("theory check needs exactly one of FILE or --library NAME")
    if args.rating_max < 1:
        return _fail(f"--rating-max must be >= 1, got {args.rating_max}")
    if args.library is not None:
        if args.library not in REGISTRY:
            return _fail(f"--library {args.library!r} is not a built-in rule; one of {', '.join(REGISTRY)}")
        theory, declared, what = REGISTRY[args.library](), DECLARED.get(args.library, ()), "library rule"
    else:
        try:
            theory, declared = _load_theory_file(Path(args.file))
        except ValueError as e:
            return _fail(str(e))
        what = f"file {args.file}"
    try:
        results = check_properties(theory, PROPERTIES, rating_max=args.rating_max)
    except SandboxError as e:  # a code theory the sandbox refuses or that fails on the check pairs
        return _fail(f"{args.file}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    print(f"{theory.name} ({what}; ratings 0..{args.rating_max}, validities 0.9/0.8/0.7/0.6)")
    for r in results:
        mark = "declared" if r.name in declared else "not declared"
        verdict = "FAILS" if not r.holds else "holds" if r.n_checked else "holds (vacuously)"
        line = f"  {r.name:16s} {verdict}  ({mark}; {r.n_checked} checks)"
        if r.counterexample is not None:
            a, b, detail = r.counterexample
            line += f"  counterexample A={a} B={b}: {detail}"
        print(line)
    broken = [r.name for r in results if r.name in declared and not r.holds]
    if declared:
        print(f"declared properties: {'all hold' if not broken else 'FAIL ' + ', '.join(broken)}")
    return 0


def cmd_sandbox_check(args: argparse.Namespace) -> int:
    from agentmill.methods.autocog.sandbox import layers

    for k, v in layers().items():
        print(f"{k:28s} {v}")
    print("note: the boundary is bubblewrap + seccomp (kernel-enforced); the AST policy and audit hook are defence in "
          "depth (PEP 578); answers are validated by the parent")
    return 0


EXAMPLES = """\
examples:
  agentmill autocog run --run-dir runs/autocog-ttb --gt ttb --eps 0.25 --rounds 2
  agentmill autocog leaderboard runs/autocog-ttb --prospective
  agentmill autocog recover --grid smoke --out runs/recovery --workers 1"""
RUN_DIR_HELP = "run folder (the --run-dir of 'autocog run': ledger, state.json, cli_args.json)"


def register(sub) -> None:
    p = sub.add_parser("autocog", help="AutoCog (E176): closed-loop discovery of decision theories",
                       description="AutoCog: advocates propose experiment designs that tell two decision theories "
                                   "apart, a cohort answers,\nan arbiter picks the theory to revise and a reviser "
                                   "replaces it; every step goes into a hash-chained ledger.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="autocog_cmd", required=True,
                         help="the subcommand ('agentmill autocog SUBCOMMAND -h' shows its flags)")
    r = s.add_parser("run", help="run the loop (programmatic or LLM roles) against a simulated or human cohort")
    r.add_argument("--run-dir", required=True,
                   help="folder for the run's ledger and state (created; the same arguments again continue the run, "
                        "other arguments are refused)")
    r.add_argument("--roles", choices=("search", "llm"), default="search",
                   help="search: programmatic advocates, arbiter and reviser, offline (default); llm: an LM plays the "
                        "roles (needs --lm), the programmatic ones as fallback")
    r.add_argument("--lm", default=None, help="lm spec for --roles llm (openai:MODEL@URL, scripted:...)")
    r.add_argument("--cohort", choices=("simulated", "human"), default="simulated",
                   help="simulated: a hidden ground-truth theory answers (--gt, --eps; default); human: participants "
                        "of the web app (--db)")
    r.add_argument("--db", default=None, help="--cohort human: the participant app's SQLite database")
    r.add_argument("--config", default=None,
                   help="--cohort human: the study config YAML (consent text, recruitment caps, exclusion rules, "
                        "token lifetime), hashed into the ledger and pinned in the database")
    r.add_argument("--task", choices=tuple(HUMAN_TASKS), default="binary",
                   help="--cohort human: binary (R=1, seeds TTB+WADD) or cardinal (R=5, seeds TTB+Tallying)")
    r.add_argument("--gt", default="ttb", help=f"hidden ground truth: {', '.join(GTS)}")
    r.add_argument("--eps", type=float, default=0.25,
                   help="ground-truth action noise: the share of answers that are coin flips, in [0, 1] (default 0.25)")
    r.add_argument("--rounds", type=int, default=5,
                   help="design-data-revision rounds, followed by one validation round (default 5)")
    r.add_argument("--seed", type=int, default=0, help="seed of the loop and of the simulated cohort (default 0)")
    r.add_argument("--n-designs", type=int, default=200,
                   help="random candidate designs each programmatic advocate scores per proposal (default 200)")
    r.add_argument("--max-candidates", type=int, default=600,
                   help="most candidate theories the programmatic reviser scores per revision (default 600)")
    r.add_argument("--gate", default="welch", help="discrimination gate: welch (the paper's), power, jsd_static, "
                   "jsd_sequence; ledgered, so a resume with another gate is refused")
    r.set_defaults(fn=cmd_run)
    for name, fn, helptext in (("resume", cmd_resume, "resume a killed run from its ledger"),
                               ("status", cmd_status, "print a run's status"),
                               ("leaderboard", cmd_leaderboard, "print a run's leaderboard (--prospective: and "
                                                                "each theory's score after its admission)"),
                               ("audit", cmd_audit, "verify hash chain, blobs, completeness, state.json")):
        q = s.add_parser(name, help=helptext)
        q.add_argument("run_dir", help=RUN_DIR_HELP)
        if name == "resume":
            q.add_argument("--force-config", action="store_true",
                           help="continue even though the loop's config differs from the ledgered one")
        if name == "leaderboard":
            q.add_argument("--prospective", action="store_true",
                           help="also print each theory's score on observations after its admission")
        q.set_defaults(fn=fn)
    rc = s.add_parser("recover", help="AC-7 recovery grid (GT x noise x seeds), resumable per run")
    rc.add_argument("--grid", choices=("smoke", "quick", "full"), default="quick",
                    help="profile of experiment e176.recovery whose grid and budgets to run (default quick)")
    rc.add_argument("--out", required=True,
                    help="folder of the runs, one per cell and seed under OUT/GRID/, and OUT/GRID/summary.json")
    rc.add_argument("--workers", type=int, default=2, help="runs in parallel, one process each (default 2)")
    rc.set_defaults(fn=cmd_recover)
    b = s.add_parser("battery", help="build or check the frozen held-out battery")
    b.add_argument("action", choices=("build", "check"),
                   help="build: regenerate the batteries (R=1 and R=5) and write them; check: print the shipped ones' "
                        "hashes and checks")
    b.add_argument("--out", default=None, help="build: battery JSON to write (default: the shipped battery.json)")
    b.set_defaults(fn=cmd_battery)
    v = s.add_parser("serve", help="serve the participant page (FastAPI + SQLite)")
    v.add_argument("--db", required=True, help="the study's SQLite database (created if missing)")
    v.add_argument("--study", default=None,
                   help="study config YAML, pinned in --db (default: the config already pinned there, else the "
                        "built-in defaults)")
    v.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; another address needs ethics_reference in the study "
                        "config)")
    v.add_argument("--port", type=int, default=8765, help="TCP port (default 8765)")
    v.add_argument("--test-mode", action="store_true",
                   help="add the fault-injection endpoint for load tests (loopback only)")
    v.set_defaults(fn=cmd_serve)
    se = s.add_parser("sessions", help="create participant sessions")
    se.add_argument("action", choices=("create",), help="create: print one participant link per new session")
    se.add_argument("--db", required=True, help="the study's SQLite database (of 'autocog serve')")
    se.add_argument("--obs", required=True,
                    help="observation id awaiting data, as 'autocog run' prints it")
    se.add_argument("--n", type=int, default=30,
                    help="sessions (participant links) to create, within the study's max_recruit (default 30)")
    se.add_argument("--base-url", default="http://127.0.0.1:8765",
                    help="address participants reach the app at; links are BASE-URL/s/TOKEN "
                         "(default http://127.0.0.1:8765)")
    se.set_defaults(fn=cmd_sessions)
    e = s.add_parser("export", help="export trials and participants")
    e.add_argument("--db", required=True, help="the study's SQLite database")
    e.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="table format (default csv)")
    e.add_argument("--out", required=True,
                   help="folder for trials.*, participants.* and loop.jsonl (created)")
    e.add_argument("--include-excluded", action="store_true",
                   help="also export the trials of participants the exclusion rules drop")
    e.add_argument("--include-raw-pids", action="store_true",
                   help="also write raw_pids.* (participant -> raw PID; only stored under store_raw_pid: true)")
    e.set_defaults(fn=cmd_export)
    fx = s.add_parser("fixture", help="verify the human-data fixture or replay the authors' scores from it")
    fx.add_argument("action", choices=("verify", "replay"),
                    help="verify: file hashes against the manifest; replay: rescore a run and compare with the "
                         "authors' final leaderboard")
    fx.add_argument("dir", help="fixture folder (manifest.json, binary/, cardinal/), e.g. tests/fixtures/autocog_human")
    fx.add_argument("--run", choices=("binary", "cardinal"), default=None, help="replay: which human run to rescore")
    fx.set_defaults(fn=cmd_fixture)
    th = s.add_parser("theory", help="check a theory's declarable properties against its code")
    th.add_argument("action", choices=("check",), help="check: test every declarable property")
    th.add_argument("file", nargs="?", default=None,
                    help="JSON/YAML theory recipe (state.json's theories[...].spec, optional 'properties' list)")
    th.add_argument("--library", default=None, help="check a built-in rule instead (ttb, wadd, dial, ...)")
    th.add_argument("--rating-max", type=int, default=5, help="cardinal scale of the sampled pairs (1 = binary only)")
    th.set_defaults(fn=cmd_theory)
    c = s.add_parser("sandbox-check", help="print which sandbox layers are active")
    c.set_defaults(fn=cmd_sandbox_check)
