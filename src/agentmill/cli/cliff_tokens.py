"""``agentmill cliff``: the exact cliff test, potential scans of chained-addition traces, cliff detection and typing,
and the tiny chained-addition model (docs/methods/cliff_tokens.md). A thin face over
``agentmill.methods.cliff_tokens``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXAMPLES = """examples:
  agentmill cliff test --k-prev 32 --k-curr 16 --n 64
  agentmill cliff scan --n-problems 20 --n 64 --seed 0 --out scans.jsonl
  agentmill cliff detect --in scans.jsonl
"""


def cmd_table(args: argparse.Namespace) -> int:
    from agentmill.methods.cliff_tokens.ztest import CliffTest, cliff_matrix, min_detectable, null_fp_rate

    test = CliffTest(delta0=args.delta0, z=args.z)
    m = cliff_matrix(args.n, test)
    print(f"n = {args.n}, delta0 = {test.delta0}, z = {test.z}: {int(m.sum())} cliff cells of {(args.n + 1) ** 2}")
    print("k_prev  min drop  max V_t")
    for kp, d, v in min_detectable(args.n, test):
        print(f"{kp:6d}  {d:8.4f}  {v:7.4f}")
    print("null false-positive rate per position:")
    for v in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95):
        print(f"  V = {v:4.2f}: {null_fp_rate(v, args.n, test):.5%}")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    from agentmill.methods.cliff_tokens.ztest import CliffTest, is_cliff, z_and_p

    test = CliffTest(delta0=args.delta0, z=args.z)
    n_curr = args.n_curr or args.n
    flag = bool(is_cliff(args.k_prev, args.n, args.k_curr, n_curr, test))
    zs, p = z_and_p(args.k_prev, args.n, args.k_curr, n_curr, test)
    print(json.dumps({"cliff": flag, "drop": args.k_prev / args.n - args.k_curr / n_curr, "z": zs, "p": p}))
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.core.records import write_text_atomic
    from agentmill.methods.cliff_tokens.core import chainadd_verifier, study_trace
    from agentmill.methods.cliff_tokens.planted import ChainAddOracle, prompt_ids, sample_problem
    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator
    from agentmill.methods.cliff_tokens.ztest import CliffTest

    oracle = ChainAddOracle()
    rng = np.random.default_rng(args.seed)
    cfg = PotentialConfig(n=args.n, window=args.window, seed=args.seed)
    lines = []
    for i in range(args.n_problems):
        ops = sample_problem(rng)
        leaf = oracle.sample_trace(ops, rng)
        q, tr = prompt_ids(ops), leaf.ids.tolist()
        est = PotentialEstimator(oracle, chainadd_verifier(ops), cfg)
        r = study_trace(oracle, est, q, tr, CliffTest(), seed_key=(i,))
        lines.append(json.dumps({"schema": "agentmill.cliffscan/1", "problem": list(ops), "lm": "chainadd-oracle",
                                 "temperature": 1.0, "seed": [args.seed, i], "grade": bool(leaf.correct),
                                 **r["scan"].to_dict(), "cliffs": [c.__dict__ for c in r["cliffs"]],
                                 "types": r["types"], "types_top20": r["types_top20"],
                                 "expected_false_cliffs": r["expected_false"]}))
    write_text_atomic(args.out, "\n".join(lines) + "\n")
    n_cl = sum(len(json.loads(x)["cliffs"]) for x in lines)
    print(f"wrote {len(lines)} scans with {n_cl} cliffs to {args.out}")
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.methods.cliff_tokens.ztest import CliffTest, detect

    test = CliffTest(delta0=args.delta0, z=args.z, correction=args.correction)
    path = Path(args.inp)
    if not path.exists():
        raise ValueError(f"--in {path} does not exist: write it with 'agentmill cliff scan'")
    for ln, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("schema") != "agentmill.cliffscan/1":
            raise ValueError(f"{path} line {ln + 1}: not an agentmill.cliffscan/1 record")
        cl = detect(np.asarray(rec["k"]), np.asarray(rec["n"]), rec["trace_ids"], test)
        text = bytes(t for t in rec["trace_ids"] if t < 256).decode("ascii", errors="replace")
        marks = ", ".join(f"{c.pos}:{text[c.pos - 1]!r} {c.k_prev}/{c.n_prev}->{c.k_curr}/{c.n_curr}" for c in cl)
        print(f"{ln:4d} {'ok  ' if rec['grade'] else 'fail'} {text}  cliffs: {marks or '-'}")
    return 0


def cmd_train_tiny(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.cliff_tokens.planted import tiny_gate, train_chainadd_tiny

    lm, losses = train_chainadd_tiny(steps=args.steps, layers=args.layers, d=args.d, batch=args.batch,
                                     seed=args.seed)
    gate = tiny_gate(lm, n_problems=args.gate_problems, n_sampled=min(200, args.gate_problems), seed=args.seed + 1)
    out = lm.save(args.out)
    write_json_atomic(Path(out) / "card.json", {"recipe": {k: v for k, v in vars(args).items() if k != "fn"}, "final_loss": losses[-1],
                                                "gate": gate})
    print(json.dumps({"out": str(out), "final_loss": losses[-1], "gate": gate}, indent=1, default=str))
    return 0


def cmd_train_chainadd(args: argparse.Namespace) -> int:
    from agentmill.methods.cliff_tokens.chainadd import ChainRecipe, gate_text, obtain_chainadd

    recipe = ChainRecipe(order=args.order, layers=args.layers, d=args.d, steps=args.steps, batch=args.batch,
                         seed=args.seed, site_weight=args.site_weight,
                         train_mix=(1 / 3, 1 / 3, 1 / 3) if args.balanced_mix else (0.2, 0.3, 0.5))
    lm, card = obtain_chainadd(recipe, Path(args.out), gate_problems=args.gate_problems)
    print(gate_text(card["gate"]))
    print(json.dumps({k: card.get(k) for k in ("source", "weights_sha256", "key", "train_s", "final_loss")},
                     default=str))
    return 0 if card["gate"]["passed"] else 1


def register(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("cliff", help="cliff tokens: exact cliff test, potential scans, taxonomy (E172)",
                        description="Cliff tokens: estimate a trace's potential by forked rollouts, flag tokens where "
                                    "it drops\n(one-sided z-test with margin), type them, and build one-token "
                                    "preference pairs.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="cliff_cmd", required=True,
                           help="the subcommand ('agentmill cliff SUBCOMMAND -h' shows its flags)")

    def test_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--delta0", type=float, default=0.1, help="margin of H0: drop <= delta0 (default 0.1)")
        p.add_argument("--z", type=float, default=1.645, help="one-sided critical value (default 1.645)")

    t = ps.add_parser("table", help="print the cliff test's table: minimum detectable drops and null FP rates")
    t.add_argument("--n", type=int, default=64, help="continuations per potential (default 64)")
    test_flags(t)
    t.set_defaults(fn=cmd_table)

    z = ps.add_parser("test", help="apply the cliff test to one pair of counts")
    z.add_argument("--k-prev", type=int, required=True, help="correct continuations at t-1")
    z.add_argument("--k-curr", type=int, required=True, help="correct continuations at t")
    z.add_argument("--n", type=int, default=64, help="continuations at t-1 (default 64)")
    z.add_argument("--n-curr", type=int, default=0, help="continuations at t (default: --n)")
    test_flags(z)
    z.set_defaults(fn=cmd_test)

    s = ps.add_parser("scan", help="scan planted chained-addition traces of the exact oracle; write JSONL")
    s.add_argument("--n-problems", type=int, default=20, help="traces to sample and scan (default 20)")
    s.add_argument("--n", type=int, default=64, help="continuations per position (default 64)")
    s.add_argument("--window", type=int, default=1, help="score every w-th position (default 1)")
    s.add_argument("--seed", type=int, default=0, help="seed of problems, traces and rollouts (default 0)")
    s.add_argument("--out", required=True, help="output JSONL (one agentmill.cliffscan/1 record per trace)")
    s.set_defaults(fn=cmd_scan)

    d = ps.add_parser("detect", help="detect cliffs in a scan file and print them")
    d.add_argument("--in", dest="inp", required=True, help="scan JSONL written by 'agentmill cliff scan'")
    d.add_argument("--correction", default="none", choices=("none", "holm", "bh"),
                   help="correction across one trace's positions (default none, as the paper)")
    test_flags(d)
    d.set_defaults(fn=cmd_detect)

    tt = ps.add_parser("train-tiny", help="train a tiny byte-level model on oracle traces and run its gate")
    tt.add_argument("--steps", type=int, default=2000, help="training steps (default 2000)")
    tt.add_argument("--layers", type=int, default=3, help="transformer blocks (default 3)")
    tt.add_argument("--d", type=int, default=96, help="residual width (default 96)")
    tt.add_argument("--batch", type=int, default=128, help="sequences per step (default 128)")
    tt.add_argument("--gate-problems", type=int, default=2000, help="held-out problems for the gate (default 2000)")
    tt.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    tt.add_argument("--out", required=True, help="directory for config.json, model.safetensors and card.json")
    tt.set_defaults(fn=cmd_train_tiny)

    tc = ps.add_parser("train-chainadd", help="distil the planted chained-addition policy into a tiny model (the "
                                              "CT-7/CT-8 substrate) and run its gate; exit 1 if the gate fails")
    tc.add_argument("--order", default="lsd", choices=("msd", "lsd"),
                    help="digit order written in the trace: msd (chainadd-v1) or lsd (the fallback; default)")
    tc.add_argument("--steps", type=int, default=3600, help="training steps (default 3600)")
    tc.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    tc.add_argument("--d", type=int, default=64, help="residual width (default 64)")
    tc.add_argument("--batch", type=int, default=64, help="traces per step (default 64)")
    tc.add_argument("--site-weight", type=float, default=5.0, help="loss weight of planted-site positions (default 5)")
    tc.add_argument("--balanced-mix", action="store_true",
                    help="train on a 1/3-1/3-1/3 DF / UC / neither problem mix (the gate uses 20/30/50)")
    tc.add_argument("--gate-problems", type=int, default=2000, help="held-out problems for the gate (default 2000)")
    tc.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    tc.add_argument("--out", required=True, help="directory under which chainadd-<order>-<key>/ is written (a shipped "
                                                 "copy of the same recipe is used instead)")
    tc.set_defaults(fn=cmd_train_chainadd)
