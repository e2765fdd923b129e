"""The ``agentmill`` command line: a thin face over ``experiments`` and ``report``.

    agentmill list [--papers]
    agentmill run <id> [--profile quick] [--set key=value ...] [--model SPEC] [--executor serial|process|ray]
                       [--ray-address ADDR]
    agentmill reproduce [--profile quick] [--model SPEC] [--only ID ...] [--fresh] [--jobs N]
    agentmill report [--profile quick] [--save-results | --markdown [--check]] [--results-dir results]

Exit codes: 0 success, 1 an experiment failed or a file could not be read or written (one line names the path and
the OS error), 2 bad input (unknown id, bad --set, empty or bad model spec). A malformed record is moved to
``history/`` with one line and its experiment counts as not run (``experiments.runner``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentmill.cli.bars import progress_bar
from agentmill.core.sandbox import SandboxUnavailable
from agentmill.experiments.protocol import PROFILES
from agentmill.lm.base import LMError

EXECUTORS = ("serial", "process", "ray")

# Method-specific command groups (``agentmill serve``, ``agentmill dspark train`` ...) live in their own modules
# under ``agentmill.cli``; each defines ``register(sub)`` that adds its parsers with ``set_defaults(fn=...)``.
# Imports stay lazy inside each command's function so ``agentmill list`` never loads torch or fastapi.
COMMAND_MODULES: tuple[str, ...] = (
    "agentmill.cli.tree",
    "agentmill.cli.maze",
    "agentmill.cli.autocog",
    "agentmill.cli.serve",
    "agentmill.cli.dspark",
    "agentmill.cli.envs",
    "agentmill.cli.g2po",
    "agentmill.cli.progress",
    "agentmill.cli.constraint_rot",
    "agentmill.cli.router",
    "agentmill.cli.metis",
    "agentmill.cli.red_queen",
    "agentmill.cli.world_model",
    "agentmill.cli.sherloc",
    "agentmill.cli.bayes_ship",
    "agentmill.cli.first_token_probe",
    "agentmill.cli.forensics",
    "agentmill.cli.kernelpro",
    "agentmill.cli.crosscoder",
    "agentmill.cli.cliff_tokens",
)


def _parse_sets(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ValueError(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _console():
    from rich.console import Console

    # Piped output (CI logs, grep) gets a wide fixed width so ids and numbers are never wrapped mid-word.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 180)


def _verdict_style(v: str) -> str:
    return {"supported": "green", "not_supported": "red", "inconclusive": "yellow", "error": "bold red"}.get(v, "dim")


def cmd_list(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from agentmill.experiments import paper_modules, registry, unavailable
    from agentmill.experiments.runner import load_record

    if args.papers:
        return _list_papers()
    table = Table(title="agentmill experiments",
                  caption="needs: the extras an experiment runs with ([red]red[/]: not installed here; "
                          "pip install 'agentmill\\[<extra>]'); model experiments also need their --model's backend "
                          "(the default hf:smollm2 needs 'hf'). A quick budget marked 'check only': quick runs the "
                          "experiment as a pipeline check and its claims are judged at full")
    for col in ("experiment", "needs", "quick budget", "claim", "test", f"verdict ({args.profile})", "title / claim"):
        table.add_column(col)
    for exp_id, exp in registry().items():
        rec = load_record(Path(args.runs_dir), args.profile, exp_id)
        budget = f"{exp.quick_budget_s:g} s" if exp.quick_budget_s is not None else "-"
        if exp.quick_check:  # quick runs it as a pipeline check: its claims are judged at full
            budget += "\ncheck only"
        table.add_row(f"[bold]{exp_id}[/]", _needs(exp), budget, "", "",
                      "error" if rec and rec.status != "ok" else "", exp.title)
        for c in exp.claims:
            v = rec.verdicts.get(c.id, "") if rec and rec.status == "ok" else ""
            table.add_row("", "", "", c.id, f"{c.metric} {c.threshold_text}", f"[{_verdict_style(v)}]{v}[/]",
                          c.statement)
    missing_extras = unavailable()
    for package, missing in missing_extras.items():
        table.add_row(f"[bold]{package.rsplit('.', 1)[1]}/*[/]", ", ".join(f"[red]{m}[/]" for m in missing), "", "",
                      "", "", f"{len(paper_modules(package))} experiments, not loaded (install line below)")
    console = _console()
    console.print(table)
    # The install lines go below the table, unwrapped: a table cell may shrink and cut them short (a long extras
    # list did, once the table grew), and a user copies them as they are.
    for package, missing in missing_extras.items():
        console.print(escape(f"{package.rsplit('.', 1)[1]}/*: pip install 'agentmill[{','.join(missing)}]'"),
                      soft_wrap=True)
    return 0


def _list_papers() -> int:
    """``agentmill list --papers``: one row per paper (``report.papers.group_by_paper``), then one per paper package
    this install cannot load (claims unknown: its experiments are not defined)."""
    from importlib import import_module

    from rich.markup import escape
    from rich.table import Table

    from agentmill.experiments import paper_modules, registry, unavailable
    from agentmill.report.papers import group_by_paper

    papers = group_by_paper(registry())
    n_exps = sum(len(p.experiments) for p in papers)
    n_claims = sum(len(e.claims) for p in papers for e in p.experiments)
    table = Table(title="agentmill papers",
                  caption=f"{len(papers)} papers, {n_exps} experiments, {n_claims} claims; 'agentmill list' shows "
                          f"every claim with its test and latest verdict")
    for col, justify in (("paper", "left"), ("experiments", "right"), ("claims", "right"), ("citation", "left")):
        table.add_column(col, justify=justify)
    for p in papers:
        table.add_row(f"[bold]{p.label}[/]", str(len(p.experiments)), str(sum(len(e.claims) for e in p.experiments)),
                      escape(p.citation))
    for package, missing in unavailable().items():  # one row each too, so no paper silently vanishes
        name = package.rsplit(".", 1)[1]
        table.add_row(f"[bold]{name.split('_', 1)[0].upper()}[/]", str(len(paper_modules(package))), "-",
                      escape(f"{getattr(import_module(package), 'PAPER', name)} (not loaded: pip install "
                             f"'agentmill[{','.join(missing)}]')"))
    _console().print(table)
    return 0


def _needs(exp) -> str:
    """The extras ``exp`` declares (``+model`` for a model experiment), the missing ones in red."""
    from agentmill.core.extras import missing_extras

    missing = set(missing_extras(exp.requires))
    names = [f"[red]{x}[/]" if x in missing else x for x in sorted(exp.requires)]
    return ", ".join(names + (["+model"] if exp.uses_model else [])) or "core"


def _print_record(console, exp, rec) -> None:
    if rec.status != "ok":
        from rich.markup import escape

        console.print(f"[bold red]{exp.id} failed:[/] {escape(str(rec.error))}")
        return
    from rich.markup import escape

    from agentmill.report.render import missing_reason, model_label

    for c in exp.claims:
        est = rec.metrics.get(c.metric)
        v = rec.verdicts.get(c.id, "")
        why = rec.reasons.get(c.id, "")
        if v == "not_judged":  # withheld on purpose: show what was observed and why, never "missing … inconclusive"
            seen = rec.metrics.get(f"{c.metric}_observed") or est
            value, label = (f"{seen.fmt()} (observed)" if seen is not None else "not measured"), "not judged"
        else:
            value, label = (est.fmt() if est is not None else missing_reason(rec)), v
        tail = f" — {escape(why)}" if why and v not in ("supported", "not_supported") else ""
        console.print(f"  {c.id:<12} {c.metric} = {escape(value)}  ({c.threshold_text})  "
                      f"[{_verdict_style(v)}]{label}[/]{tail}")
    console.print(f"  [dim]{rec.wall_seconds:.1f} s, model {model_label(rec)}, record "
                  f"{Path(rec.profile) / (exp.id + '.json')}[/]")


def _progress_factory(progress):
    def factory(exp):
        task = progress.add_task(exp.id, total=None)

        def update(desc: str, done: float, total: float | None) -> None:
            progress.update(task, description=f"{exp.id}: {desc}", completed=done, total=total)

        return update

    return factory


def cmd_run(args: argparse.Namespace) -> int:
    from agentmill.experiments import get
    from agentmill.experiments.runner import check_model_spec, executor_options, run_experiment

    exp = get(args.id)
    overrides = _parse_sets(args.set)
    exp.setup_for(args.profile, overrides)  # validate before any work
    check_model_spec(args.model)
    executor_options(args.executor, args.ray_address)
    console = _console()
    with progress_bar() as progress:
        rec = run_experiment(exp, profile=args.profile, model=args.model, overrides=overrides,
                             executor=args.executor, runs_dir=args.runs_dir,
                             progress=_progress_factory(progress)(exp), resume=not args.fresh,
                             ray_address=args.ray_address)
    _print_record(console, exp, rec)
    return 0 if rec.status == "ok" else 1


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def cmd_reproduce(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from agentmill.experiments import get, paper_modules, registry, unavailable
    from agentmill.experiments.runner import check_model_spec, executor_options, run_suite

    check_model_spec(args.model)  # bad input fails before the banner and before any worker starts
    executor_options(args.executor, args.ray_address)
    exps = [get(i) for i in args.only] if args.only else list(registry().values())
    console = _console()
    if not args.only:
        for package, missing in unavailable().items():
            console.print("[yellow]skipped[/] " + escape(f"the {len(paper_modules(package))} experiments of "
                                                          f"{package.rsplit('.', 1)[1]}: "
                                                          f"pip install 'agentmill[{','.join(missing)}]'"))
    console.print(f"[bold]agentmill reproduce[/] — {len(exps)} experiments at profile [bold]{args.profile}[/]"
                  f", model {args.model or 'hf:smollm2'}")
    failed = []
    with progress_bar() as progress:
        overall = progress.add_task("suite", total=len(exps))

        def done(exp, rec):
            progress.advance(overall)
            if rec.status != "ok":
                failed.append(exp.id)

        records = run_suite(exps, profile=args.profile, model=args.model, executor=args.executor,
                            runs_dir=args.runs_dir, progress_factory=_progress_factory(progress),
                            resume=not args.fresh, on_done=done, jobs=args.jobs, ray_address=args.ray_address)
    for exp, rec in zip(exps, records):
        console.print(f"[bold]{exp.id}[/]")
        _print_record(console, exp, rec)
    index = _render(args.profile, args.runs_dir, args.report_dir, jobs=args.jobs)
    console.print(f"report: {index}")
    if failed:
        console.print(f"[bold red]{len(failed)} experiment(s) failed:[/] {', '.join(failed)}")
    return 1 if failed else 0


def _render(profile: str, runs_dir: str, report_dir: str, results_dir: str = "results",
            jobs: int | None = None) -> Path:
    from agentmill.experiments import registry
    from agentmill.experiments.runner import load_record
    from agentmill.report import render_report

    reg = registry()
    records = [r for i in reg if (r := load_record(Path(runs_dir), profile, i)) is not None]
    return render_report(records, reg, report_dir, results_dir=results_dir, jobs=jobs)


def cmd_report(args: argparse.Namespace) -> int:
    """Three jobs over stored results: the HTML report (default), the result summaries to commit
    (``--save-results``), and the published markdown tables (``--markdown``, ``--check``)."""
    console = _console()
    if args.check and not args.markdown:
        raise ValueError("--check goes with --markdown (it compares README.md and docs/verdicts.md with the render)")
    if args.markdown:
        from agentmill.experiments import registry, unavailable
        from agentmill.report.markdown import write_tables

        if unavailable():  # a paper left out would silently vanish from the published tables
            missing = sorted({x for m in unavailable().values() for x in m})
            raise ImportError(f"the verdict tables list every paper; install pip install "
                              f"'agentmill[{','.join(missing)}]' first")
        stale = write_tables(registry(), args.results_dir, args.readme, args.verdicts_doc, check=args.check)
        if args.check:
            for path in stale:
                console.print(f"[red]{path} differs from the render of {args.results_dir}/; run 'agentmill report "
                              f"--markdown'[/]")
            return 1 if stale else 0
        console.print(f"verdict tables: {', '.join(map(str, stale)) or 'already up to date'}")
        return 0
    if args.save_results:
        from agentmill.experiments import registry
        from agentmill.experiments.runner import RunRecord, current_setup_hash, is_current, load_record, record_setup
        from agentmill.report.results import save_summaries, variant_of

        reg = registry()
        records = [r for i in reg if (r := load_record(Path(args.runs_dir), args.profile, i)) is not None]
        # a published verdict has a record from the current code behind it: a record whose setup, version or read
        # artefacts changed since it ran (a trim, a retrained drafter) is left out until it is rerun
        # (a model variant, run with --set naming another model, is checked against its own setup: its version and
        # artefacts must be current; a record of the registered model must match the registered setup)
        def current(r: RunRecord) -> bool:
            exp = reg[r.experiment_id]
            own = record_setup(exp, r) if variant_of(r, exp) is not None else None
            return is_current(r, exp, current_setup_hash(exp, args.profile, r.model, own))

        stale = sorted(r.experiment_id for r in records if not current(r))
        if stale:
            console.print(f"[yellow]{len(stale)} record(s) are stale (setup, version or artefacts changed since they "
                          f"ran) and were not published; rerun them: {', '.join(stale)}[/]")
        records = [r for r in records if r.experiment_id not in stale]
        written = save_summaries(records, reg, args.results_dir)
        console.print(f"wrote {len(written)} result summaries to {Path(args.results_dir) / args.profile} "
                      f"({len(reg) - len(written)} experiments have no {args.profile} record in {args.runs_dir})")
        dirty = sorted(r.experiment_id for r in records if (r.git_commit or "").endswith("+dirty"))
        if dirty:
            console.print(f"[yellow]{len(dirty)} of them ran from a tree with uncommitted changes (+dirty), e.g. "
                          f"{', '.join(dirty[:3])}: publish results of a committed tree[/]")
        return 0
    index = _render(args.profile, args.runs_dir, args.report_dir, args.results_dir)
    console.print(f"report: {index}")
    return 0


DESCRIPTION = """\
Reproduce the key claims of LLM-agent papers at small scale on a CPU: list the experiments, run one or all of
them, render the report. The other commands are the papers' methods as tools of their own."""
EPILOG = """\
examples:
  agentmill list --papers
  agentmill run e162.collapse_law --profile quick
  agentmill reproduce --profile quick --jobs 2
  agentmill report --save-results

'agentmill COMMAND -h' shows a command's flags and examples. Exit codes: 0 success, 1 an experiment failed or a
file could not be read or written, 2 bad input (unknown id, bad --set, bad model spec)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentmill", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True,
                           help="the command ('agentmill COMMAND -h' shows its flags)")

    def common(sp, model=True):
        sp.add_argument("--profile", default="quick", choices=PROFILES,
                        help="experiment size: smoke (a wiring check, never judged), quick (default) or full")
        sp.add_argument("--runs-dir", default="runs", help="where run records and checkpoints live")
        if model:
            sp.add_argument("--model", default=None, help="model spec, e.g. hf:smollm2 (default), "
                                                          "openai:<model>@<base_url>, tiny:<path>")
            sp.add_argument("--executor", default="serial", choices=EXECUTORS,
                            help="how an experiment's independent work units run: serial (default, in this process), "
                                 "process (a local process pool) or ray; the results are the same")
            sp.add_argument("--ray-address", default=None, metavar="ADDR",
                            help="with --executor ray: join the Ray cluster at ADDR (host:port, ray://host:port or "
                                 "auto) instead of starting a local runtime; $RAY_ADDRESS does the same")
            sp.add_argument("--fresh", action="store_true", help="rerun even if a matching record exists")

    sp = sub.add_parser("list", help="list experiments, their claims and latest verdicts")
    sp.add_argument("--papers", action="store_true",
                    help="one row per paper (label, citation, number of experiments and claims) instead of one row "
                         "per claim; no verdicts, so --profile and --runs-dir are not read")
    common(sp, model=False)
    sp.set_defaults(fn=cmd_list)

    sp = sub.add_parser("run", help="run one experiment")
    sp.add_argument("id", help="experiment id as 'agentmill list' shows it, e.g. e162.collapse_law")
    sp.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setup field")
    common(sp)
    sp.set_defaults(fn=cmd_run)

    sp = sub.add_parser("reproduce", help="run every experiment and write the report (the main job)")
    sp.add_argument("--only", nargs="+", metavar="ID", help="run only these experiment ids")
    sp.add_argument("--report-dir", default="report",
                    help="folder of the HTML report: index.html and one page per paper (default: report)")
    sp.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1, metavar="N",
                    help="run up to N single-core experiments side by side (those with no timing claim, model "
                         "experiments on one torch thread each); timing experiments run one at a time on a core of "
                         "their own, beside model-free experiments only (default: the number of CPUs)")
    common(sp)
    sp.set_defaults(fn=cmd_reproduce)

    sp = sub.add_parser(
        "report", help="render the HTML report; save result summaries; render the published verdict tables",
        description="Default: render report/index.html (one row per paper) and report/<paper>.html from the records "
                    "in --runs-dir at --profile, each claim beside the committed full verdict from "
                    "<results-dir>/full. --save-results: write <results-dir>/<profile>/<id>.json, the small "
                    "summaries to commit, from those records (a run on another model than the registered one, "
                    "e.g. --model hf:qwen-coder-0.5b, is written as <id>@<model>.json and shown beside the "
                    "registered model's rows). --markdown: write the README's verdict block and "
                    "docs/verdicts.md from <results-dir>/quick and <results-dir>/full (not from runs); with --check, "
                    "write nothing and exit 1 when the committed files differ from that render.")
    sp.add_argument("--report-dir", default="report",
                    help="folder of the HTML report: index.html and one page per paper (default: report)")
    sp.add_argument("--results-dir", default="results", help="committed result summaries (default: results)")
    mode = sp.add_mutually_exclusive_group()
    mode.add_argument("--save-results", action="store_true",
                      help="write <results-dir>/<profile>/<id>.json from the records in --runs-dir")
    mode.add_argument("--markdown", action="store_true",
                      help="write the README verdict block and docs/verdicts.md from <results-dir>")
    sp.add_argument("--check", action="store_true", help="with --markdown: exit 1 if the files differ from the render")
    sp.add_argument("--readme", default="README.md", help="with --markdown: the file holding the verdict markers")
    sp.add_argument("--verdicts-doc", default="docs/verdicts.md", help="with --markdown: the per-claim tables")
    common(sp, model=False)
    sp.set_defaults(fn=cmd_report)

    from importlib import import_module

    for name in COMMAND_MODULES:
        import_module(name).register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (KeyError, ValueError, LMError, ImportError) as e:
        # Bad input (unknown id, bad --set, bad or unloadable model, missing extra): one line, no traceback.
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"agentmill: error: {msg}", file=sys.stderr)
        return 2
    except SandboxUnavailable as e:  # bubblewrap missing or unusable: the message says how to install it
        print(f"agentmill: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        # A disk condition (unwritable --runs-dir or --report-dir, a full disk): the path and the OS error on one
        # line, not a traceback; records finished before it are kept.
        where = e.filename2 or e.filename
        print(f"agentmill: error: {f'{where}: ' if where else ''}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentmill: interrupted; finished records are kept, rerun to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
