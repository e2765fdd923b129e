"""``agentmill world-model``: collect KeyDoor transitions, train a tiny language world model (CPT, SFT, RL), score
it on the five dimensions, run a policy inside it, and export/score AgentWorldBench files (docs/methods/world_model.md).
A thin face over ``agentmill.methods.world_model``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXAMPLES = """examples:
  agentmill world-model collect --train 40 --cpt 160 --dev 10 --test 30 --episodes 4 --seed 0 --out data/wm
  agentmill world-model train --stage sft --data data/wm/transitions.jsonl --steps 300 --out ckpt/sft
  agentmill world-model eval --wm ckpt/sft --data data/wm/transitions.jsonl --split test --n 96 --out report.json
"""


def cmd_collect(args: argparse.Namespace) -> int:
    from agentmill.methods.world_model.data import assign_splits, collect_keydoor

    tasks = assign_splits(args.train, args.cpt, args.dev, args.test, args.seed)
    table = collect_keydoor(tasks, args.episodes, seed=args.seed)
    path = table.to_jsonl(Path(args.out) / "transitions.jsonl")
    changed = sum(r.changed for r in table.rows) / max(1, len(table.rows))
    print(json.dumps({"rows": len(table.rows), "tasks": len(tasks), "changed_share": round(changed, 3),
                      "out": str(path)}))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from agentmill.methods.world_model.recipe import train_stage

    log = train_stage(args.stage, Path(args.data), Path(args.out), init=Path(args.init) if args.init else None,
                      steps=args.steps, reward=args.reward, seed=args.seed, d=args.d, layers=args.layers, lr=args.lr)
    print(json.dumps({k: v for k, v in log.items() if k not in ("losses", "rl")}))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agentmill.methods.world_model.recipe import evaluate_dir

    rep = evaluate_dir(args.wm, Path(args.data), split=args.split, n=args.n, closed_loop=args.closed_loop)
    if args.out:
        Path(args.out).write_text(json.dumps(rep, indent=1))
    print(json.dumps(rep["summary"], indent=1))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from agentmill.methods.world_model.recipe import simulate_random

    print(json.dumps(simulate_random(args.wm, args.layout_seed, args.episodes, args.seed), indent=1))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from agentmill.methods.world_model.bench import export_bench
    from agentmill.methods.world_model.data import TransitionTable
    from agentmill.methods.world_model.pipeline import FMT

    table = TransitionTable.from_jsonl(args.data)
    path = export_bench(table.episodes(args.split), FMT, args.out)
    print(f"wrote {path}")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from agentmill.methods.world_model.bench import score

    rows = [json.loads(x) for x in Path(args.judged).read_text().splitlines() if x.strip()]
    print(json.dumps(score(rows, args.aggregation), indent=1))
    return 0


def register(sub) -> None:
    sp = sub.add_parser("world-model", help="language world models for agent environments: train, judge, simulate "
                                            "(E167)",
                        description="A language world model plays the environment: given the card, the state and "
                                    "the action it\nreasons, then writes the next observation in the Qwen-AgentWorld "
                                    "format.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="wm_cmd", required=True,
                           help="the subcommand ('agentmill world-model SUBCOMMAND -h' shows its flags)")
    c = ps.add_parser("collect", help="play KeyDoor with the mixed behaviour policy and write transitions")
    c.add_argument("--train", type=int, default=40, help="layouts whose transitions feed SFT (default 40)")
    c.add_argument("--cpt", type=int, default=160, help="layouts whose episodes feed continual pre-training "
                                                        "(default 160)")
    c.add_argument("--dev", type=int, default=10, help="development layouts (default 10)")
    c.add_argument("--test", type=int, default=30, help="held-out test layouts (default 30)")
    c.add_argument("--episodes", type=int, default=4, help="episodes per layout (default 4)")
    c.add_argument("--seed", type=int, default=0, help="layout and behaviour seed (default 0)")
    c.add_argument("--out", required=True, help="directory for transitions.jsonl")
    c.set_defaults(fn=cmd_collect)
    t = ps.add_parser("train", help="one stage on a tiny model: cpt (from scratch), sft or rl (from --init)")
    t.add_argument("--stage", required=True, choices=("cpt", "sft", "rl"), help="which stage")
    t.add_argument("--data", required=True, help="transitions.jsonl from 'collect'")
    t.add_argument("--init", default=None, help="a directory saved by an earlier stage (default: a fresh model "
                                                 "with a BPE trained on the data)")
    t.add_argument("--steps", type=int, default=100, help="optimiser steps, or GRPO iterations for rl (default 100)")
    t.add_argument("--reward", default="hybrid", choices=("hybrid", "rule", "judge_naive", "judge_guarded"),
                   help="rl reward (default hybrid)")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate (default: 1e-3 cpt, 3e-3 sft, 5e-5 rl)")
    t.add_argument("--layers", type=int, default=2, help="blocks of a fresh model (default 2)")
    t.add_argument("--d", type=int, default=64, help="width of a fresh model (default 64)")
    t.add_argument("--seed", type=int, default=0, help="initialisation and batch seed (default 0)")
    t.add_argument("--out", required=True, help="output directory (model/, log.json)")
    t.set_defaults(fn=cmd_train)
    e = ps.add_parser("eval", help="greedy one-step scores on the five rule dimensions (changed/unchanged split)")
    e.add_argument("--wm", required=True, help="a directory saved by 'train', or any LM spec (tiny:, hf:, openai:)")
    e.add_argument("--data", required=True, help="transitions.jsonl")
    e.add_argument("--split", default="test", choices=("train", "dev", "test"), help="split scored (default test)")
    e.add_argument("--n", type=int, default=96, help="transitions scored, half changed (default 96)")
    e.add_argument("--closed-loop", type=int, default=0, help="also replay episodes this many steps on the model's "
                                                              "own predictions (default 0: off)")
    e.add_argument("--out", default=None, help="write the full report JSON here")
    e.set_defaults(fn=cmd_eval)
    s = ps.add_parser("simulate", help="play random episodes in the simulated and the real KeyDoor task")
    s.add_argument("--wm", required=True, help="a directory saved by 'train'")
    s.add_argument("--layout-seed", type=int, default=7_000_000, help="the KeyDoor layout (default 7000000)")
    s.add_argument("--episodes", type=int, default=20, help="episodes in each env (default 20)")
    s.add_argument("--seed", type=int, default=0, help="policy seed (default 0)")
    s.set_defaults(fn=cmd_simulate)
    x = ps.add_parser("export", help="write transitions as AgentWorldBench records (score any WM with the official "
                                     "script)")
    x.add_argument("--data", required=True, help="transitions.jsonl")
    x.add_argument("--split", default="test", choices=("train", "cpt", "dev", "test"), help="split (default test)")
    x.add_argument("--out", required=True, help="output directory (textgame_test.jsonl)")
    x.set_defaults(fn=cmd_export)
    o = ps.add_parser("score", help="aggregate a judged AgentWorldBench JSONL (official or strict failure "
                                    "accounting)")
    o.add_argument("--judged", required=True, help="judged.jsonl (rows with the five dimensions and 'failed')")
    o.add_argument("--aggregation", default="strict", choices=("strict", "official"),
                   help="strict counts a failed row as 1 on every dimension; official drops it (default strict)")
    o.set_defaults(fn=cmd_score)
