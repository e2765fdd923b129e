"""``agentmill red-queen``: Red Queen searches over ReviewWorld, the world checks, and a ledger audit (E178).

    agentmill red-queen run [--world review] [--statistic mcnemar] [--erasure invalidate] [--trap audit]
                            [--budget 512] [--judge logistic] [--seed 0] --out DIR
    agentmill red-queen world-check [--seed 0]
    agentmill red-queen audit DIR

A thin face over ``agentmill.methods.red_queen``: ``run`` writes a hash-chained ledger and ``state.json`` under
``--out`` (an existing ledger there is resumed; a different configuration is refused) and prints the result as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXAMPLES = """examples:
  agentmill red-queen world-check --seed 0
  agentmill red-queen run --world review --budget 512 --seed 0 --out runs/rq0
  agentmill red-queen audit runs/rq0
"""


def cmd_world_check(args: argparse.Namespace) -> int:
    from agentmill.envs.review_world import WorldConstants
    from agentmill.methods.red_queen.review import failing_checks, world_checks

    checks = world_checks(args.seed)
    print(json.dumps({"seed": args.seed, "constants": WorldConstants().to_dict(), "checks": checks}, indent=1,
                     default=float))
    bad = failing_checks(checks)
    if bad:
        print(f"agentmill: world checks fail: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from agentmill.methods.red_queen import RedQueenConfig, build_review_search

    if args.judge != "logistic":
        raise ValueError(f"--judge {args.judge}: only 'logistic' is available from the command line (the LM judge "
                         "needs rendered documents; see LMJudge in the Python API)")
    cfg = RedQueenConfig(budget=args.budget, statistic=args.statistic, erasure=args.erasure, trap=args.trap,
                         seed=args.seed)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    try:
        search, world, _ = build_review_search(args.world, cfg, ledger_dir=out)
    except RuntimeError as e:  # a world failing its checks
        raise ValueError(str(e)) from None
    res = search.run()
    final = search.judges[0]
    r_inc, _ = world.bias_ratio(world.incumbent())
    r_fin, _ = world.bias_ratio(final)
    print(json.dumps({"out": str(out), "world": args.world, "best_node": res.best_node, "best_writer": res.best_state,
                      "best_belief": res.best_belief, "replacements": [{k: v for k, v in r.items() if k != "judge"}
                                                                       for r in res.replacements],
                      "epochs": res.epochs, "n_valid": res.n_valid, "n_invalid": res.n_invalid,
                      "anchor_tests_run": res.anchor_tests_run, "audit_labels_used": res.audit_labels_used,
                      "bias_R_incumbent": r_inc, "bias_R_final": r_fin}, indent=1, default=float))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from agentmill.methods.red_queen.audit import audit_dir

    report = audit_dir(Path(args.dir))
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


def register(sub) -> None:
    sp = sub.add_parser("red-queen", help="Red Queen Gödel Machine: search with a co-evolving judge and selective "
                                          "erasure, on ReviewWorld (E178)",
                        description="Evolve writers under a reviewer that is itself replaced at checkpoints when a "
                                    "challenger beats it on a sealed anchor;\nreplacement invalidates every record "
                                    "the old reviewer scored.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="red_queen_cmd", required=True,
                           help="the subcommand ('agentmill red-queen SUBCOMMAND -h' shows its flags)")
    r = ps.add_parser("run", help="one search; ledger and state.json under --out (resumes an existing ledger)")
    r.add_argument("--world", default="review", choices=("review", "review-strict", "review-lenient-anchor"),
                   help="review: biased incumbent; review-strict: over-strict incumbent; review-lenient-anchor: the "
                        "anchor is labelled leniently (default review)")
    r.add_argument("--statistic", default="mcnemar", choices=("mcnemar", "best_belief"),
                   help="replacement rule: paired exact McNemar at alpha/K (default) or strict best-belief")
    r.add_argument("--erasure", default="invalidate", choices=("invalidate", "off"),
                   help="invalidate records scored by a displaced judge (default) or keep them (ablation)")
    r.add_argument("--trap", default="audit", choices=("audit", "parity", "off"),
                   help="the adversarial challenger: audit (buys oracle labels), parity (label-free) or off")
    r.add_argument("--budget", type=int, default=512, help="utility evaluations (default 512)")
    r.add_argument("--judge", default="logistic", help="judge family: logistic (the only one this command runs)")
    r.add_argument("--seed", type=int, default=0, help="world and search seed (default 0)")
    r.add_argument("--out", required=True, help="run directory: ledger.jsonl, blobs/, state.json")
    r.set_defaults(fn=cmd_run)
    w = ps.add_parser("world-check", help="run the ReviewWorld checks WC-1..WC-4 and print the world constants")
    w.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    w.set_defaults(fn=cmd_world_check)
    a = ps.add_parser("audit", help="verify a run directory: hash chain, replay equals state.json, replacements "
                                    "only at checkpoints, no valid record with a stale judge tag")
    a.add_argument("dir", help="run directory written by red-queen run")
    a.set_defaults(fn=cmd_audit)
