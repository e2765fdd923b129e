"""``agentmill router``: record outcome tables, train a learned router over workers, evaluate it, route a query.

    agentmill router record --workers hf:smollm2,solver:arith,solver:string --out table.jsonl
    agentmill router train --table table.jsonl --features ngram --lambda 0 --out router.json
    agentmill router eval --router router.json --table table.jsonl --split test
    agentmill router route "What is 37 + 58?" --router router.json --deny solver:arith

A thin face over ``agentmill.methods.router``: workers are ``solver:<name>`` (arith, string, date, unit, lookup) or
any model spec (``hf:smollm2``, ``openai:MODEL@URL``). Recording appends one fsynced row per call and resumes where
a killed run stopped; replaying a worker whose fingerprint changed is an error.
"""

from __future__ import annotations

import argparse
import json
import sys

EXAMPLES = """examples:
  agentmill router record --workers solver:arith,solver:string,solver:date,solver:unit,solver:lookup --out t.jsonl
  agentmill router record --workers hf:smollm2 --out t.jsonl --batch 8
  agentmill router train --table t.jsonl --out router.json
  agentmill router train --table t.jsonl --lambda auto --cost latency --out router.json
  agentmill router eval --router router.json --table t.jsonl --split test
  agentmill router route "What is 37 + 58?" --router router.json --deny solver:arith
"""


DESCRIPTION = """Record outcome tables, train a learned router over workers (E166, Sakana Fugu), evaluate it, route a query.

Workers are solver:<name> (arith, string, date, unit, lookup) or any model spec (hf:smollm2, openai:MODEL@URL).
Recording appends one fsynced row per call and resumes where a killed run stopped; replaying a worker whose
fingerprint changed is an error. Serve a trained router with: agentmill serve --router router.json
"""

GROUP_EXAMPLES = """examples:
  agentmill router record --workers hf:smollm2,solver:arith,solver:string --out t.jsonl
  agentmill router train --table t.jsonl --lambda auto --out router.json
  agentmill router route "What is 37 + 58?" --router router.json --deny solver:arith
"""


def _workers(text: str) -> list[str]:
    specs = [s.strip() for s in text.split(",") if s.strip()]
    if not specs:
        raise ValueError("--workers needs at least one worker spec (solver:<name> or a model spec)")
    if len(set(specs)) != len(specs):
        raise ValueError(f"--workers lists a worker twice: {text}")
    return specs


def cmd_record(args: argparse.Namespace) -> int:
    from agentmill.envs.route_tasks import RouteTasks
    from agentmill.methods.router.table import environment_versions, record_outcomes
    from agentmill.methods.router.workers import LMWorker, make_worker

    if args.tasks != "route-tasks":
        raise ValueError(f"--tasks {args.tasks}: only route-tasks is built in")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    tasks = RouteTasks(seed=args.seed, per_template=args.per_template)
    workers = []
    for spec in _workers(args.workers):
        w = make_worker(spec)
        if isinstance(w, LMWorker):
            w.batch = args.batch
        workers.append(w)
    header = {"package_versions": environment_versions()}
    for w in workers:
        lm = getattr(w, "lm", None)
        if lm is not None and getattr(lm, "info", {}).get("gguf_sha256"):
            header["gguf_sha256"] = lm.info["gguf_sha256"]
            header["decode"] = w.decode

    def progress(worker: str, done: int, total: int) -> None:
        if done == total or done % 200 == 0:
            print(f"agentmill: {worker}: {done}/{total} cells", file=sys.stderr, flush=True)

    table = record_outcomes(tasks, workers, args.out, replicates=args.replicates, header=header, progress=progress)
    print(json.dumps({"out": args.out, "cells": len(table), "workers": table.workers}))
    return 0


def _lambda(text: str) -> float | str:
    from agentmill.methods.router import LAMBDA_GRID
    if text == "auto":
        return "auto"
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"--lambda must be 'auto' or one of {LAMBDA_GRID}, got {text!r}") from None
    if v not in LAMBDA_GRID:
        raise ValueError(f"--lambda {text} is not in the grid {LAMBDA_GRID}; use one of them or 'auto'")
    return v


def _tasks_for(table) -> object:
    from agentmill.envs.route_tasks import RouteTasks
    seed = table.header.get("seed") or 0
    tasks = RouteTasks(seed=int(seed))
    unknown = [q for q in table.query_ids if q not in tasks.by_id]
    if unknown:
        raise ValueError(f"the table has query ids that are not RouteTasks queries (e.g. {unknown[0]!r}); "
                         "train needs their texts")
    return tasks


def _complete_workers(table, tasks) -> list[str]:
    ids = [q.qid for q in tasks.queries if q.qid in set(table.query_ids)]
    return [w for w in table.workers if table.complete(ids, w)]


def cmd_train(args: argparse.Namespace) -> int:
    from agentmill.cli.files import existing_file, output_path
    from agentmill.methods.router import OutcomeTable, Router, RouterConfig

    table = OutcomeTable.load(existing_file(args.table, "--table"))
    out = output_path(args.out, "--out")
    tasks = _tasks_for(table)
    workers = _workers(args.workers) if args.workers else _complete_workers(table, tasks)
    if args.es_generations < 0:
        raise ValueError(f"--es-generations must be >= 0, got {args.es_generations}")
    cfg = RouterConfig(features=args.features, tau=args.tau, cost=args.cost, cost_lambda=_lambda(args.lam),
                       es=args.es_generations > 0, es_generations=args.es_generations, seed=args.seed)
    router = Router(cfg, workers)
    have = set(table.query_ids)
    rep = router.fit(table, [q for q in tasks.ids("train") if q in have], [q for q in tasks.ids("val") if q in have],
                     tasks.texts)
    router.save(out)
    print(json.dumps({"out": str(out), "workers": workers, "lambda": rep.lam, "val_acc": round(rep.val_acc, 4),
                      "val_acc_sft": round(rep.val_acc_sft, 4), "seconds": round(rep.seconds, 2)}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.cli.files import existing_file
    from agentmill.methods.router import OutcomeTable, Router
    from agentmill.methods.router import baselines as B
    from agentmill.methods.router import metrics as M

    router = Router.load(existing_file(args.router, "--router"))
    table = OutcomeTable.load(existing_file(args.table, "--table"))
    for w, fp in router.fingerprints.items():
        if fp:
            table.check_fingerprint(w, fp)
    tasks = _tasks_for(table)
    router.check_pool(table.workers)
    have = set(table.query_ids)
    ids = [q for q in tasks.ids(args.split) if q in have]
    Y, _, C = table.matrices(ids, router.workers)
    Yv = table.matrices([q for q in tasks.ids("val") if q in have], router.workers)[0]
    choice = router.route_features(router.features.transform([tasks.texts[q] for q in ids]))
    best = B.best_single(Yv)
    print(json.dumps({"split": args.split, "n": len(ids), "router_acc": round(M.accuracy(choice, Y), 4),
                      "router_latency": round(M.mean_cost(choice, C), 6),
                      "best_single_val": router.workers[best], "best_single_acc": round(float(Y[:, best].mean()), 4),
                      "oracle_acc": round(float(Y.max(1).mean()), 4),
                      "shares": dict(zip(router.workers, np.round(M.shares(choice, len(router.workers)), 4).tolist()))}))
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    from agentmill.cli.files import existing_file
    from agentmill.methods.router import Router

    router = Router.load(existing_file(args.router, "--router"))
    deny = set(_workers(args.deny)) if args.deny else set()
    unknown = deny - set(router.workers)
    if unknown:
        raise ValueError(f"--deny names workers not in the router: {sorted(unknown)}")
    d = router.route(args.query, allowed=set(router.workers) - deny if deny else None)
    print(json.dumps({"worker": d.worker, "fallback": d.fallback, "ranked": list(d.ranked),
                      "feature_ms": round(d.feature_ms, 3), "scores": {k: round(v, 4) for k, v in d.scores.items()}}))
    return 0


def register(sub) -> None:
    p = sub.add_parser("router", help="learned routing over workers (E166, Sakana Fugu): record, train, eval, route",
                       description=DESCRIPTION, epilog=GROUP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    rs = p.add_subparsers(dest="router_cmd", required=True, help="record, train, eval or route")

    r = rs.add_parser("record", help="run workers on every RouteTasks query and append outcome rows (resumable)",
                      epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--tasks", default="route-tasks", help="task set to record (only route-tasks is built in)")
    r.add_argument("--workers", required=True, help="comma-separated worker specs: solver:<name> or a model spec")
    r.add_argument("--out", required=True, help="outcome table JSONL to create or continue")
    r.add_argument("--replicates", type=int, default=1, help="calls per (query, worker); use >= 3 when sampling")
    r.add_argument("--seed", type=int, default=0, help="RouteTasks generation seed")
    r.add_argument("--per-template", type=int, default=20, help="queries per template (1..20; 20 = all 1,200)")
    r.add_argument("--batch", type=int, default=8, help="prompts per generate call for model workers")
    r.set_defaults(fn=cmd_record)

    t = rs.add_parser("train", help="fit a router (soft-target head, then sep-CMA-ES) on a recorded table",
                      epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--table", required=True, help="outcome table JSONL recorded by router record")
    t.add_argument("--out", required=True, help="router JSON to write")
    t.add_argument("--workers", default="", help="comma-separated workers to route between (default: every worker "
                   "with a cell for every query)")
    t.add_argument("--features", default="ngram", help="ngram or hidden:<model spec>[:last|:mean]")
    t.add_argument("--cost", default="latency", choices=["latency", "tokens", "usd"],
                   help="cost column: recorded latency, or the table's cost column (tokens or USD)")
    t.add_argument("--lambda", dest="lam", default="0", help="cost weight: auto or a grid value 0 0.05 0.1 0.2 0.4 0.8")
    t.add_argument("--tau", type=float, default=0.1, help="soft-target temperature of the first stage")
    t.add_argument("--es-generations", type=int, default=60, help="sep-CMA-ES generations (0 = first stage only)")
    t.add_argument("--seed", type=int, default=0, help="seed of the evolution stage")
    t.set_defaults(fn=cmd_train)

    e = rs.add_parser("eval", help="accuracy, cost and traffic shares of a router on a table split",
                      epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--router", required=True, help="router JSON written by router train")
    e.add_argument("--table", required=True, help="outcome table JSONL with cells for the router's workers")
    e.add_argument("--split", default="test", choices=["train", "val", "test"], help="RouteTasks split to score")
    e.set_defaults(fn=cmd_eval)

    q = rs.add_parser("route", help="print the worker a router picks for one query (with scores)",
                      epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("query", help="the query text")
    q.add_argument("--router", required=True, help="router JSON written by router train")
    q.add_argument("--deny", default="", help="comma-separated workers to mask (opt-out); the next best is used")
    q.set_defaults(fn=cmd_route)
