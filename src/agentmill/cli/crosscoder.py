"""``agentmill crosscoder``: collect paired activations, train and diagnose a crosscoder, rank and steer its latents,
build the tiny tool pair (docs/methods/crosscoder.md). A thin face over ``agentmill.methods.crosscoder``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXAMPLES = """examples:
  agentmill crosscoder toy --steps 300 --partition 0.05,0.05 --out runs/cc-toy
  agentmill crosscoder steer --lm tiny:DIR --cc runs/cc --layer 1 --features 3,7 --alpha 8 --prompt "User: hi"
  agentmill crosscoder sibling --show
"""


def _partition(text: str | None):
    from agentmill.methods.crosscoder import Partition

    if not text:
        return None
    try:
        a, b = (float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--partition takes two fractions 'A,B' (e.g. 0.05,0.05), got {text!r}") from None
    return Partition(a, b)


def _config(args: argparse.Namespace):
    from agentmill.methods.crosscoder import CrossCoderConfig

    if getattr(args, "e175", False):
        return CrossCoderConfig.e175(dict_size=args.dict_size, k=args.k).scaled(steps=args.steps)
    return CrossCoderConfig(dict_size=args.dict_size, sparsity=args.sparsity, k=args.k, steps=args.steps,
                            partition=_partition(args.partition), warmup=min(100, args.steps // 10), seed=args.seed)


def _print_diag(cc, x) -> None:
    from agentmill.methods.crosscoder import diagnose

    print(json.dumps(diagnose(cc, x).summary(), indent=1))


def cmd_toy(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.methods.crosscoder import train_crosscoder
    from agentmill.methods.crosscoder.synthetic import make_toy_pair

    toy = make_toy_pair(n=args.rows, seed=args.seed)
    cc, log = train_crosscoder(toy.x, _config(args))
    if args.out:
        cc.save(args.out)
        print(f"saved {args.out}")
    _print_diag(cc, toy.x * np.asarray(cc.scales, np.float32)[None, :, None])
    return 0


def cmd_tool_pair(args: argparse.Namespace) -> int:
    from agentmill.methods.crosscoder.organism import compute_gates, make_prompts
    from agentmill.methods.crosscoder.toolpair import ToolPairConfig, build_tool_pair, greedy

    root = Path(args.out) if args.out else None
    if root is None:
        from agentmill.core.paths import cache_root

        root = cache_root() / "crosscoder" / "toolpair"
    pair = build_tool_pair(ToolPairConfig(base_steps=args.base_steps, sibling_steps=args.sibling_steps), root)
    tool = make_prompts("tool", args.n_test, split="test", seed=2)
    gen = make_prompts("generic", max(2, args.n_test // 2), split="test", seed=2)
    gates = compute_gates(lambda ps: greedy(pair.sibling, ps), lambda ps: greedy(pair.base, ps), tool, gen)
    print(f"pair at {pair.root}\n{gates.text()}")
    return 0


def cmd_sibling(args: argparse.Namespace) -> int:
    from agentmill.methods.crosscoder import sibling as S

    cfg = S.SiblingConfig(steps=args.steps)
    if args.show:
        g = S.find_gates(cfg)
        print(S.gates_text(g) if g else f"{S.NAME}: not trained and gated on this machine (recipe: {cfg})")
        return 0
    sib = S.build_tool_sibling(cfg, progress=lambda d: print(f"step {d['step']}/{d['steps']} loss {d['loss']:.4f} "
                                                            f"({d['seconds']:.0f} s)", flush=True))
    _, g = S.sibling_gates(sib, n_test=args.n_test)
    print(f"adapter at {sib.adapter}\n{S.gates_text(g | {'adapter': sib.adapter.name})}")
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    from agentmill.lm import load_lm
    from agentmill.methods.crosscoder.store import collect_paired

    a, b = load_lm(args.a), load_lm(args.b)
    texts = [t for t in Path(args.texts).read_text(encoding="utf-8").splitlines() if t.strip()]
    ids = [a.render(t) for t in texts]
    st = collect_paired([a, b], ids, layer=args.layer, store=args.out, positions=args.positions)
    print(f"{st.meta['rows']} rows in {len(st.shard_names())} shard(s) at {st.path}; s_A={st.meta['s_A']:.4g}, "
          f"s_B={st.meta['s_B']:.4g}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from agentmill.methods.crosscoder import train_crosscoder
    from agentmill.methods.crosscoder.store import ActivationStore

    st = ActivationStore(args.store)
    x = st.rows()
    cc, log = train_crosscoder(x, _config(args), scales=st.scales)
    cc.identity = st.identity
    cc.save(args.out)
    print(f"trained {cc.D} latents in {log.seconds:.1f} s; saved {args.out}")
    _print_diag(cc, x)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from agentmill.methods.crosscoder import CrossCoder
    from agentmill.methods.crosscoder.store import ActivationStore

    st = ActivationStore(args.store)
    cc = CrossCoder.load(args.cc, expect_identity=st.identity)
    _print_diag(cc, st.rows())
    return 0


def cmd_steer(args: argparse.Namespace) -> int:
    from agentmill.lm import load_lm
    from agentmill.methods.crosscoder import CrossCoder
    from agentmill.methods.crosscoder.interventions import steer
    from agentmill.methods.crosscoder.toolpair import greedy_ids

    lm = load_lm(args.lm)
    cc = CrossCoder.load(args.cc)
    feats = [int(v) for v in args.features.split(",") if v.strip()]
    view = {"A": 0, "B": 1}[args.view]
    ids = [lm.render(args.prompt)]
    clean = greedy_ids(lm, ids, max_new=args.max_new)[0]
    steered = greedy_ids(lm, ids, max_new=args.max_new, intervention=lambda P: steer(
        lm, cc, layer=args.layer, view=view, features=feats, alpha=args.alpha, positions=args.positions,
        prompt_len=P))[0]
    print(json.dumps({"clean": clean, "steered": steered, "features": feats, "alpha": args.alpha}, indent=1))
    return 0


def _train_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sparsity", default="batchtopk", choices=("l1", "topk", "batchtopk"),
                   help="sparsity rule (default batchtopk)")
    p.add_argument("--k", type=int, default=8, help="active latents per row (default 8)")
    p.add_argument("--dict-size", type=int, default=256, help="number of latents (default 256)")
    p.add_argument("--steps", type=int, default=1000, help="optimiser steps (default 1000)")
    p.add_argument("--partition", default=None, help="DFC blocks as 'A,B' fractions, e.g. 0.05,0.05 (default none)")
    p.add_argument("--e175", action="store_true", help="use the E175 recipe (TopK, no normalisation, its L1 terms)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")


def register(sub) -> None:
    sp = sub.add_parser("crosscoder", help="crosscoder model diffing: train, diagnose, steer (E175)",
                        description="Crosscoders: one sparse code over two models' residual streams, a decoder per "
                                    "model;\ndiagnostics, feature ranking and steering through the code.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="crosscoder_cmd", required=True,
                           help="the subcommand ('agentmill crosscoder SUBCOMMAND -h' shows its flags)")
    t = ps.add_parser("toy", help="train on the planted toy pair and print diagnostics")
    _train_flags(t)
    t.add_argument("--rows", type=int, default=50_000, help="toy rows (default 50000)")
    t.add_argument("--out", default=None, help="directory to save the crosscoder (default: not saved)")
    t.set_defaults(fn=cmd_toy)
    tp = ps.add_parser("tool-pair", help="build (or load) the tiny tool pair and print its gates")
    tp.add_argument("--base-steps", type=int, default=1200, help="base training steps (default 1200)")
    tp.add_argument("--sibling-steps", type=int, default=600, help="sibling training steps (default 600)")
    tp.add_argument("--n-test", type=int, default=200, help="test tool prompts for the gates (default 200)")
    tp.add_argument("--out", default=None, help="root directory (default: the agentmill cache)")
    tp.set_defaults(fn=cmd_tool_pair)
    sb = ps.add_parser("sibling", help="train (once; cached) and gate the SmolLM2-135M LoRA tool sibling")
    sb.add_argument("--steps", type=int, default=120, help="LoRA optimiser steps of batch 8 (default 120)")
    sb.add_argument("--n-test", type=int, default=200, help="test tool prompts for the gates (default 200)")
    sb.add_argument("--show", action="store_true", help="print the recorded gates only; load and train nothing")
    sb.set_defaults(fn=cmd_sibling)
    c = ps.add_parser("collect", help="collect paired activations of two models into a store")
    c.add_argument("--a", required=True, help="model A spec (the fine-tuned sibling), e.g. tiny:DIR")
    c.add_argument("--b", required=True, help="model B spec (the base)")
    c.add_argument("--layer", type=int, required=True, help="block whose output is read (0-indexed)")
    c.add_argument("--texts", required=True, help="text file, one prompt per line")
    c.add_argument("--positions", default="prompt", choices=("prompt", "last"),
                   help="every prompt position (position 0 excluded) or the last (default prompt)")
    c.add_argument("--out", required=True, help="store directory")
    c.set_defaults(fn=cmd_collect)
    tr = ps.add_parser("train", help="train a crosscoder on a store")
    tr.add_argument("--store", required=True, help="store directory from 'collect'")
    _train_flags(tr)
    tr.add_argument("--out", required=True, help="directory to save the crosscoder")
    tr.set_defaults(fn=cmd_train)
    d = ps.add_parser("diagnose", help="FVU, L0, dead latents, partition integrity, relative norms")
    d.add_argument("--cc", required=True, help="crosscoder directory")
    d.add_argument("--store", required=True, help="store it was trained on")
    d.set_defaults(fn=cmd_diagnose)
    s = ps.add_parser("steer", help="greedy generation with and without scaling latents")
    s.add_argument("--lm", required=True, help="model spec whose residual is edited")
    s.add_argument("--cc", required=True, help="crosscoder directory")
    s.add_argument("--layer", type=int, required=True, help="block the crosscoder reads")
    s.add_argument("--view", default="A", choices=("A", "B"), help="which model of the pair --lm is (default A)")
    s.add_argument("--features", required=True, help="comma-separated latent ids")
    s.add_argument("--alpha", type=float, default=8.0, help="scale of the features' codes (default 8)")
    s.add_argument("--positions", default="last_prompt", choices=("last_prompt", "prompt", "generated", "all"),
                   help="positions edited (default last_prompt)")
    s.add_argument("--prompt", required=True, help="prompt text")
    s.add_argument("--max-new", type=int, default=32, help="new tokens (default 32)")
    s.set_defaults(fn=cmd_steer)
