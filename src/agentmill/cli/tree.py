"""``agentmill collapse`` and ``agentmill tree``: collapse tables, rollout-log reports, and tree sampling (E162;
docs/methods/tree_rollouts.md).

    agentmill collapse table [--G 2,4,8,16,32] [--p 0.01,0.05,0.1,0.3] [--delta 0.5]
    agentmill collapse report ROLLOUTS.jsonl [--group-key prompt_id] [--reward-key reward] [--G 2,4,8,16]
    agentmill tree sample [--backend synthetic|hf] [--model SPEC] [--level 4] [--n-prompts 4] [--budget 256]
                          [--selector uucb] [--wave 1] [--out trees.jsonl] [--seed 1000]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def _floats(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} expects comma-separated numbers, got {text!r}") from None


def _ints(text: str, name: str) -> list[int]:
    vals = _floats(text, name)
    if any(v != int(v) or v < 1 for v in vals):
        raise ValueError(f"{name} expects positive integers, got {text!r}")
    return [int(v) for v in vals]


def cmd_collapse_table(args: argparse.Namespace) -> int:
    from agentmill.methods.tree_rollouts.collapse import collapse_probability, min_group_size

    Gs, ps = _ints(args.G, "--G"), _floats(args.p, "--p")
    if not 0 < args.delta < 1:
        raise ValueError(f"--delta must be in (0, 1), got {args.delta}")
    print("p \\ G   " + "".join(f"{G:>8d}" for G in Gs) + f"   G*(p, δ={args.delta:g})")
    for p in ps:
        row = "".join(f"{collapse_probability(p, G):8.3f}" for G in Gs)
        gstar = min_group_size(p, args.delta)
        print(f"{p:<8g}" + row + f"   {gstar if gstar is not None else 'lake'}")
    return 0


def cmd_collapse_report(args: argparse.Namespace) -> int:
    """Pool collapse curve, all-success/all-fail split and mixture fit of any JSONL with a group key and reward."""
    from agentmill.methods.tree_rollouts.collapse import fit_pool_mixture, pool_collapse_curve

    path = Path(args.path)
    if not path.exists():
        raise ValueError(f"no such file: {path}")
    groups: dict[str, list[float]] = defaultdict(list)
    bad = 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if args.group_key not in row or args.reward_key not in row:
                raise ValueError(f"{path}:{n}: row lacks {args.group_key!r} or {args.reward_key!r}")
            r = row[args.reward_key]
            if r is None:
                continue   # unscorable leaves are not failures
            groups[str(row[args.group_key])].append(float(r))
    if not groups:
        raise ValueError(f"{path}: no scored rows")
    counts = [(int(sum(v >= 0.5 for v in rs)), len(rs)) for rs in groups.values()]
    Gs = [G for G in _ints(args.G, "--G") if G <= min(n for _, n in counts)]
    allfail = sum(k == 0 for k, _ in counts)
    allsucc = sum(k == n for k, n in counts)
    print(f"{path}: {len(groups)} groups, {sum(n for _, n in counts)} scored rows"
          + (f", {bad} unreadable lines skipped" if bad else ""))
    print(f"  all fail (empty lake) {allfail} ({allfail / len(counts):.1%}), all success {allsucc} "
          f"({allsucc / len(counts):.1%}), mixed {len(counts) - allfail - allsucc}")
    if Gs:
        curve = pool_collapse_curve(counts, Gs)
        for G in Gs:
            e = curve[G]
            print(f"  collapse at G={G:<4d} {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}]")
    else:
        print("  (every --G exceeds the smallest group; no curve)")
    if len(counts) >= 8:
        fit = fit_pool_mixture(counts)
        print(f"  mixture fit: z0={fit.z0:.3f} z1={fit.z1:.3f} Beta({fit.a:.2f}, {fit.b:.2f})"
              f"{'' if fit.converged else '  (not converged)'}")
    else:
        print("  mixture fit needs >= 8 groups")
    return 0


def cmd_tree_sample(args: argparse.Namespace) -> int:
    """Grow trees and print them (segments, rewards, UUCB terms) with the token counters."""
    from agentmill.methods.tree_rollouts.config import TreeConfig
    from agentmill.methods.tree_rollouts.sampler import RolloutLog, build_tree, tree_metrics
    from agentmill.methods.tree_rollouts.selectors import SELECTORS, make_selector

    if args.selector not in SELECTORS:
        raise ValueError(f"--selector must be one of {', '.join(SELECTORS)}, got {args.selector!r}")
    if args.n_prompts < 1 or args.budget < 2:
        raise ValueError("--n-prompts must be >= 1 and --budget >= 2")
    sel = make_selector(args.selector)
    log = RolloutLog(args.out, run_id=f"tree-sample-{args.backend}-{args.seed}") if args.out else None
    trees = []
    try:
        if args.backend == "synthetic":
            from agentmill.methods.tree_rollouts.synthetic import SyntheticChainLM, make_pool

            lm = SyntheticChainLM()
            cfg = TreeConfig(budget_tokens=args.budget, wave=args.wave, max_new_tokens=lm.length)
            for i, q in enumerate(make_pool("hard", args.n_prompts, args.seed)):
                trees.append(build_tree(q, lm, lm.verify, sel, cfg, tree_key=(args.seed, i), prompt_key=f"synth-{i}",
                                        branch_policy=lm.branch_points, log=log,
                                        oracle=(lambda pre, q=q: lm.oracle_p(q, pre))))
                _print_tree(trees[-1], lm.decode)
        else:
            from agentmill.envs.arithmetic import STOP_REGEX, example_pair, make_pool
            from agentmill.lm import load_lm
            from agentmill.lm.fork import StopSpec, WhiteBoxForker
            from agentmill.methods.tree_rollouts.tree import Reward, step_boundary, top_entropy, union

            if args.selector == "greedy":
                raise ValueError("the greedy selector needs oracle probabilities: synthetic backend only")
            lm = load_lm(args.model)
            forker = WhiteBoxForker(lm)
            cfg = TreeConfig(budget_tokens=args.budget, wave=args.wave, max_new_tokens=48)
            for i, task in enumerate(make_pool(args.n_prompts, args.seed, levels=(args.level,))):
                prompt = task.completion_prompt(example_pair(task.level, args.seed, i))

                def verify(_t, text, task=task):
                    r = task.verify(text)
                    return Reward(r.value, r.reason)

                trees.append(build_tree(prompt, forker, verify, sel, cfg, tree_key=(args.seed, i),
                                        prompt_key=task.prompt_id, branch_policy=union(step_boundary(), top_entropy(3)),
                                        stop=StopSpec(stop_regex=STOP_REGEX), log=log))
                print(f"{task.prompt_id}: {task.question}")
                _print_tree(trees[-1], forker.decode)
    finally:
        if log is not None:
            log.close()
    m = tree_metrics(trees)
    print("counters: " + ", ".join(f"{k}={v:g}" for k, v in m.items()))
    return 0


def _print_tree(tree, decode) -> None:
    """Indented segments; a leaf line shows its reward and the selector terms that chose it."""
    leaf_end = {}
    for lf in tree.leaves:
        leaf_end.setdefault(len(lf.tokens), []).append(lf)

    def walk(node, indent: int) -> None:
        for child in node.children.values():
            end, toks = child, [next(t for t, c in node.children.items() if c is child)]
            while len(end.children) == 1 and not any(len(tree.leaves[i].tokens) == end.depth for i in end.leaves):
                tok, end = next(iter(end.children.items()))
                toks.append(tok)
            text = decode(toks).replace("\n", "⏎")
            done = [tree.leaves[i] for i in end.leaves if len(tree.leaves[i].tokens) == end.depth]
            tag = "".join(f"  → leaf {lf.id} reward={lf.reward.value} ({lf.reward.reason}) {lf.uucb_terms or ''}"
                          for lf in done)
            print(f"{'  ' * indent}[{node.depth}:{end.depth}] {text[:70]}{'…' if len(text) > 70 else ''}{tag}")
            walk(end, indent + 1)

    print(f"tree {tree.prompt_key}: {len(tree.leaves)} leaves, mixed={tree.is_mixed()}, "
          f"gen={tree.counters['gen_tokens']}, forward={tree.counters['forward_tokens']}")
    walk(tree.root, 1)


COLLAPSE_EXAMPLES = """\
examples:
  agentmill collapse table --G 4,8,16 --p 0.05,0.1 --delta 0.25
  agentmill collapse report trees.jsonl --group-key prompt_id --reward-key reward"""
TREE_EXAMPLES = """\
examples:
  agentmill tree sample --n-prompts 8 --out trees.jsonl
  agentmill tree sample --backend hf --model hf:smollm2 --level 3 --selector entropy"""


def register(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("collapse", help="advantage-collapse tables and rollout-log reports (E162)",
                        description="Advantage collapse: a group of G rollouts that all succeed or all fail "
                                    "gives GRPO no learning\nsignal. 'table' prints its probability, 'report' "
                                    "measures it in a rollout log.",
                        epilog=COLLAPSE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = sp.add_subparsers(dest="collapse_command", required=True,
                             help="the subcommand ('agentmill collapse SUBCOMMAND -h' shows its flags)")
    t = csub.add_parser("table", help="C(G, p) = p^G + (1-p)^G and the smallest G with collapse <= delta")
    t.add_argument("--G", default="2,4,8,16,32", help="group sizes (columns), comma-separated (default 2,4,8,16,32)")
    t.add_argument("--p", default="0.01,0.05,0.1,0.3",
                   help="per-rollout success probabilities (rows), comma-separated (default 0.01,0.05,0.1,0.3)")
    t.add_argument("--delta", type=float, default=0.5,
                   help="tolerated collapse probability in (0, 1); the last column is the smallest G with "
                        "C(G, p) <= delta (default 0.5)")
    t.set_defaults(fn=cmd_collapse_table)
    r = csub.add_parser("report", help="pool collapse of any JSONL with a group key and a reward")
    r.add_argument("path", help="JSONL file, one rollout per line (e.g. the --out of 'agentmill tree sample')")
    r.add_argument("--group-key", default="prompt_id",
                   help="field naming a rollout's group: rollouts of one prompt (default prompt_id)")
    r.add_argument("--reward-key", default="reward",
                   help="field holding the reward; >= 0.5 counts as a success, null rows are skipped (default reward)")
    r.add_argument("--G", default="2,4,8,16",
                   help="group sizes of the collapse curve, comma-separated; sizes above the smallest group are "
                        "dropped (default 2,4,8,16)")
    r.set_defaults(fn=cmd_collapse_report)

    sp = sub.add_parser("tree", help="grow rollout trees and print them (E162)", epilog=TREE_EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    tsub = sp.add_subparsers(dest="tree_command", required=True,
                             help="the subcommand ('agentmill tree SUBCOMMAND -h' shows its flags)")
    s = tsub.add_parser("sample", help="sample trees on the synthetic twin or a real LM")
    s.add_argument("--backend", choices=("synthetic", "hf"), default="synthetic",
                   help="synthetic: a simulated chain LM with known success odds, no model (default); hf: the "
                        "white-box --model on arithmetic prompts")
    s.add_argument("--model", default="hf:smollm2", help="white-box model spec for --backend hf (default hf:smollm2)")
    s.add_argument("--level", type=int, default=4,
                   help="arithmetic difficulty level 1-7 of the hf backend's prompts (default 4)")
    s.add_argument("--n-prompts", type=int, default=4, help="prompts, one tree each (default 4)")
    s.add_argument("--budget", type=int, default=256, help="generated-token budget of each tree (default 256)")
    s.add_argument("--selector", default="uucb",
                   help="where to branch next: uucb (default), ucb, random, entropy, independent, or greedy "
                        "(synthetic backend only)")
    s.add_argument("--wave", type=int, default=1,
                   help="branch points chosen per batch, with virtual updates of the selector in between "
                        "(default 1: one at a time)")
    s.add_argument("--seed", type=int, default=1000, help="seed of the prompt pool and of the sampling (default 1000)")
    s.add_argument("--out", default=None, help="rollout log (JSONL, one line per leaf)")
    s.set_defaults(fn=cmd_tree_sample)
