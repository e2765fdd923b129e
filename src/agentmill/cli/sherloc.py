"""``agentmill sherloc``: localize bugs into diagnostic case files, validate case files, inject them into repair,
print the case-file schema (docs/methods/sherloc.md). A thin face over ``agentmill.methods.sherloc`` and
``agentmill.envs.pyrepo``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentmill.core.records import append_jsonl

EXAMPLES = """examples:
  agentmill sherloc localize --package fixture --n 2 --lm scripted:sherloc-localizer --out cf.jsonl
  agentmill sherloc validate cf.jsonl --package fixture --n 2
  agentmill sherloc inject cf.jsonl --mode locations --repair scripted --package fixture --n 2
"""


def _lm(spec: str, record: str | None, replay: bool = False) -> Any:
    from agentmill.methods.sherloc import ScriptedLocalizer

    if spec == "scripted:sherloc-localizer":
        if record:
            raise ValueError("--record works with a model, not the scripted localizer")
        return ScriptedLocalizer()
    from agentmill.lm import load_lm

    if replay:
        from agentmill.lm.replay import RecordReplayLM

        if not record or not Path(record).exists():
            raise ValueError("--replay needs --record FILE, an existing recording of --lm")
        return RecordReplayLM(None, Path(record), mode="replay", spec=spec)
    lm = load_lm(spec)
    if record:
        from agentmill.lm.replay import RecordReplayLM

        return RecordReplayLM(lm, Path(record), mode="record-missing")
    return lm


def _tasks(package: str, n: int, seed: int) -> list[tuple[Any, Any]]:
    from agentmill.envs.pyrepo import fixture_dir, fixture_repo, open_repo, seed_bugs

    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    repo = fixture_repo(fixture_dir()) if package == "fixture" else open_repo(package)
    return [(repo, t) for t in seed_bugs(repo, n, seed=seed)]


def _done_ids(out: Path) -> set[str]:
    if not out.exists():
        return set()
    ids = set()
    for ln in out.read_text(encoding="utf-8").splitlines():
        try:
            ids.add(json.loads(ln)["instance_id"])
        except (ValueError, KeyError, TypeError):
            pass  # a torn last line after an interruption
    return ids


def cmd_localize(args: argparse.Namespace) -> int:
    from agentmill.methods.sherloc import RepoSnapshot, SherlocConfig, localize

    cfg = SherlocConfig(total_steps=args.steps, max_new_tokens=args.max_new_tokens,
                        max_tool_output_tokens=args.max_tool_output_tokens, mode=args.mode, seed=args.seed)
    lm = _lm(args.lm, args.record, args.replay)
    out = Path(args.out)
    done = _done_ids(out)
    if args.repo:
        if not args.issue:
            raise ValueError("--repo needs --issue FILE (the problem statement)")
        issue = Path(args.issue).read_text(encoding="utf-8")
        jobs = [(RepoSnapshot.from_git(args.repo, args.commit), issue, Path(args.issue).stem, str(args.repo))]
    elif args.package:
        jobs = [(RepoSnapshot.from_git(r.root, t.bug_commit), t.issue_full if args.issue_style == "full" else t.issue,
                 t.instance_id, r.key) for r, t in _tasks(args.package, args.n, args.seed)]
    else:
        raise ValueError("give --package (pyrepo seeded bugs) or --repo/--commit/--issue")
    if args.renamed:  # the memorisation control: package, modules and top-level names replaced in code and issue
        from agentmill.methods.sherloc.rename import apply, plan

        renamings = [plan(snap, cfg.excluded) for snap, *_ in jobs]
        jobs = [(apply(snap, r), r.text(issue), iid + "+renamed", name)
                for (snap, issue, iid, name), r in zip(jobs, renamings)]
    summary = {"written": 0, "skipped": 0, "success": 0}
    for snap, issue, iid, name in jobs:
        if iid in done:
            summary["skipped"] += 1
            continue
        res = localize(issue, snap, lm, cfg, instance_id=iid, repo_name=name, seed=args.seed,
                       one_shot=args.one_shot)
        append_jsonl(out, {"instance_id": iid, "status": res.status, "reason": res.reason,
                           "case_file": res.case_file, "trace": res.trace(), "validation_flags": res.validation_flags})
        summary["written"] += 1
        summary["success"] += res.status == "success"
        print(f"{iid}: {res.status} ({res.reason}), {res.turns} turns", file=sys.stderr)
    print(json.dumps({**summary, "out": str(out), "lm": args.lm}))
    return 0


def _load_case_files(path: str) -> list[tuple[str, Any]]:
    text = Path(path).read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
        rows = [obj]
    except ValueError:
        rows = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    out = []
    for k, r in enumerate(rows):
        cf = r.get("case_file", r) if isinstance(r, dict) and "case_file" in r else r
        iid = (r.get("instance_id") if isinstance(r, dict) else None) or f"row {k}"
        out.append((str(iid), cf))
    return out


def _snapshot_for(args: argparse.Namespace, iid: str) -> Any:
    from agentmill.methods.sherloc import RepoSnapshot

    if args.repo:
        return RepoSnapshot.from_git(args.repo, args.commit)
    if args.package:
        for r, t in _tasks(args.package, args.n, args.seed):
            if t.instance_id == iid:
                return RepoSnapshot.from_git(r.root, t.bug_commit)
    return None


def cmd_validate(args: argparse.Namespace) -> int:
    from agentmill.methods.sherloc import CaseFileError, validate

    bad = 0
    for iid, cf in _load_case_files(args.file):
        if cf is None:
            print(f"{iid}: no case file (the run did not succeed)")
            bad += 1
            continue
        try:
            _, flags = validate(cf, _snapshot_for(args, iid))
            print(f"{iid}: valid" + (f"; {len(flags)} flag(s): " + "; ".join(flags) if flags else ""))
        except CaseFileError as e:
            bad += 1
            print(f"{iid}: {e}")
    return 1 if bad else 0


def cmd_inject(args: argparse.Namespace) -> int:
    from agentmill.methods.sherloc import render, scripted_repair
    from agentmill.methods.sherloc.casefile import locations_of

    rows = _load_case_files(args.file)
    if args.repair == "none":
        for iid, cf in rows:
            if cf is not None:
                print(f"### {iid}\n{render(cf, args.mode)}\n")
        return 0
    from agentmill.envs.pyrepo import RepairWorkspace

    if not args.package:
        raise ValueError("--repair scripted needs --package (the pyrepo tasks the case files belong to)")
    tasks = {t.instance_id: (r, t) for r, t in _tasks(args.package, args.n, args.seed)}
    results = []
    for iid, cf in rows:
        if iid not in tasks:
            print(f"{iid}: not among the --package tasks; skipped", file=sys.stderr)
            continue
        repo, task = tasks[iid]
        locs = locations_of(cf) if cf is not None else None
        with RepairWorkspace(repo, task) as ws:
            o = scripted_repair(ws, locs, task.issue, max_attempts=args.max_attempts)
        results.append({"instance_id": iid, "resolved": o.resolved, "attempts": o.attempts, "test_runs": o.test_runs})
        print(json.dumps(results[-1]))
    print(json.dumps({"resolved": sum(r["resolved"] for r in results), "of": len(results),
                      "repairer": "scripted (plumbing: resolves iff a cited range holds the mutated line)"}))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from agentmill.methods.sherloc import SCHEMA

    print(json.dumps(SCHEMA, indent=1))
    return 0


def _source_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--package", help="pyrepo tasks: 'fixture' (the in-code package) or a cached name==version")
    p.add_argument("--n", type=int, default=4, help="seeded instances of --package (mined once, then cached)")
    p.add_argument("--seed", type=int, default=0, help="mining and sampling seed")
    p.add_argument("--repo", help="a git repository of your own (read from git objects, never its work tree)")
    p.add_argument("--commit", default="HEAD", help="commit of --repo to read")


def register(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("sherloc", help="SHERLOC: localize bugs into diagnostic case files, validate, inject",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ss = sp.add_subparsers(dest="sherloc_cmd", required=True,
                           help="the subcommand ('agentmill sherloc SUBCOMMAND -h' shows its flags)")
    lo = ss.add_parser("localize", help="run the localization loop and append case files to a JSONL file")
    _source_flags(lo)
    lo.add_argument("--issue", help="with --repo: a text file holding the problem statement")
    lo.add_argument("--issue-style", choices=("stripped", "full"), default="stripped",
                    help="pyrepo issue text: failing tests without package frames (default) or full tracebacks")
    lo.add_argument("--lm", default="scripted:sherloc-localizer",
                    help="scripted:sherloc-localizer, hf:smollm2 or openai:MODEL@URL")
    lo.add_argument("--record", help="record every model call to this JSONL (calls already in it are answered "
                    "from it)")
    lo.add_argument("--replay", action="store_true", help="answer every call from --record; never call the model")
    lo.add_argument("--steps", type=int, default=20, help="loop turns (the paper's 20)")
    lo.add_argument("--max-new-tokens", type=int, default=4096, help="generation cap per turn")
    lo.add_argument("--max-tool-output-tokens", type=int, default=None, help="cap on one tool output (1500 for "
                    "SmolLM2's 8k context; default no cap)")
    lo.add_argument("--mode", choices=("paper", "product"), default="paper",
                    help="paper: tests hidden from the view; product: tests visible")
    lo.add_argument("--one-shot", action="store_true", help="prepend one worked tool-call exchange (small models)")
    lo.add_argument("--renamed", action="store_true", help="localize in the renamed view (package, modules and "
                    "top-level names replaced in code and issue; ids get '+renamed'): the memorisation control")
    lo.add_argument("--out", required=True, help="case files JSONL (ids already in it are skipped)")
    lo.set_defaults(fn=cmd_localize)
    va = ss.add_parser("validate", help="check case files against the schema and (optionally) their repository")
    va.add_argument("file", help="a case-file JSON, or the JSONL written by localize")
    _source_flags(va)
    va.set_defaults(fn=cmd_validate)
    inj = ss.add_parser("inject", help="render case files for a repair agent, or repair pyrepo tasks with them")
    inj.add_argument("file", help="the JSONL written by localize (or one case-file JSON)")
    inj.add_argument("--mode", choices=("full", "locations"), default="full",
                     help="what is injected: locations and findings, or locations only")
    inj.add_argument("--repair", choices=("none", "scripted"), default="none",
                     help="none: print the rendered text; scripted: run the scripted repairer with each case file")
    inj.add_argument("--max-attempts", type=int, default=8, help="scripted repairer: catalogue edits tried")
    _source_flags(inj)
    inj.set_defaults(fn=cmd_inject)
    sc = ss.add_parser("schema", help="print the case-file JSON Schema (agentmill.casefile/1)")
    sc.set_defaults(fn=cmd_schema)
