"""``agentmill maze``: exact hitting times and training runs on the path-star maze (E163;
docs/methods/backtrack_maze.md).

    agentmill maze solve --W 4 --K 6 --L 2 --policy base|sft|optimal [--mc 20000] [--seed 0]
    agentmill maze train --method sft|rlvr-exact|rlvr|distill|distill-stripped --W 4 --K 5 --L 2 [--seed 0]
                         [--sft-steps ...] [--rl-lr ...] [--out policy.json]

Training flags come from the fields of :class:`agentmill.methods.backtrack_maze.MazeConfig`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

POLICIES = ("base", "sft", "optimal")
METHODS = ("sft", "rlvr-exact", "rlvr", "distill", "distill-stripped")


def _add_maze_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--W", type=int, default=4, help="arms from the hub (>= 2, default 4)")
    sp.add_argument("--K", type=int, default=5, help="depth of each arm in steps (>= 2, default 5)")
    sp.add_argument("--L", type=int, default=2, help="parallel forward edges per step (>= 1, default 2)")
    sp.add_argument("--seed", type=int, default=0,
                    help="random seed: of the --mc estimate (solve), of sampled training and traces (train); default 0")


def _env(args):
    from agentmill.envs.pathstar import PathStarMultigraph

    return PathStarMultigraph(args.W, args.K, args.L)  # ValueError (exit 2) on bad sizes


def _fmt(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:,.4g}" if x >= 1e5 else f"{x:.4f}".rstrip("0").rstrip(".")


def cmd_solve(args: argparse.Namespace) -> int:
    from agentmill.methods.backtrack_maze import (TabularPolicy, hitting_time, mc_hitting_time, optimal_time,
                                                  sft_converged_time)

    env = _env(args)
    if args.mc is not None and args.mc < 2:
        raise ValueError(f"--mc must be >= 2 episodes, got {args.mc}")
    init = {"base": "uniform", "sft": "sft_converged", "optimal": "optimal"}[args.policy]
    pol = TabularPolicy(env.W, env.K, env.L, init=init)
    ht = hitting_time(pol, env)
    T_opt = optimal_time(env.W, env.K)
    print(f"maze W={env.W} K={env.K} L={env.L}, policy {args.policy}")
    print(f"  exact E[T]          {_fmt(ht.value)}" + (f"  ({ht.reason})" if ht.reason else ""))
    print(f"  optimum T* = K(2W-1) {T_opt}   ratio {_fmt(ht.value / T_opt)}")
    if args.policy == "sft":
        print(f"  SFT closed form     {_fmt(sft_converged_time(env.W, env.K, env.L))}")
    s = pol.summary()
    print(f"  P(back|fwd) {s['p_back_fwd']:.3g}   P(back|bwd) {s['p_back_bwd']:.3g}")
    if args.mc:
        est = mc_hitting_time(pol, env, episodes=args.mc, seed=args.seed)
        print(f"  Monte Carlo         {est.value:.2f}  95% CI [{est.lo:.2f}, {est.hi:.2f}]  ({est.n} episodes)")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from agentmill.methods.backtrack_maze import (MazeConfig, TabularPolicy, collect_traces, fit_student,
                                                  hitting_time, optimal_time, sft_converged_time,
                                                  train_rlvr_exact, train_rlvr_reinforce, train_sft)

    env = _env(args)
    cfg = MazeConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(MazeConfig)})
    for f in dataclasses.fields(MazeConfig):
        if not getattr(cfg, f.name) > 0:
            raise ValueError(f"--{f.name.replace('_', '-')} must be > 0, got {getattr(cfg, f.name)}")
    t0 = time.perf_counter()
    pol = TabularPolicy(env.W, env.K, env.L)
    T_base = hitting_time(pol, env).value
    extra = ""
    if args.method == "sft":
        log = train_sft(pol, env, mode=args.sft_mode, steps=cfg.sft_steps, lr=cfg.sft_lr, batch=cfg.sft_batch,
                        seed=args.seed)
        extra = f"max |grad| on backward-facing logits over all steps: {log.grad_bwd_max:g}"
    elif args.method == "rlvr-exact":
        log = train_rlvr_exact(pol, env, steps=cfg.rl_steps, lr=cfg.rl_lr)
        extra = log.note
    else:
        log = train_rlvr_reinforce(pol, env, episodes=cfg.reinforce_episodes, batch=cfg.reinforce_batch,
                                   lr=cfg.rl_lr, t_max_factor=cfg.t_max_factor, seed=args.seed)
        if args.method.startswith("distill"):
            teacher = pol
            tr = collect_traces(teacher, env, cfg.distill_traces, seed=args.seed + 1,
                                t_max_factor=cfg.t_max_factor)
            counts = ((tr.seg_hub_counts, tr.seg_arm_counts) if args.method == "distill-stripped"
                      else (tr.hub_counts, tr.arm_counts))
            pol, _ = fit_student(env, counts[0], counts[1], tr.n, steps=cfg.distill_steps, lr=cfg.distill_lr)
            extra = (f"teacher (REINFORCE) E[T] {_fmt(hitting_time(teacher, env).value)}; "
                     f"{tr.n} successful traces, mean length {tr.mean_steps:.1f}")
    ht = hitting_time(pol, env)
    T_opt = optimal_time(env.W, env.K)
    s = pol.summary()
    print(f"maze W={env.W} K={env.K} L={env.L}, method {args.method}, seed {args.seed}")
    print(f"  E[T] base {_fmt(T_base)} -> trained {_fmt(ht.value)}" + (f" ({ht.reason})" if ht.reason else ""))
    print(f"  optimum T* {T_opt} (ratio {_fmt(ht.value / T_opt)}); SFT-converged closed form "
          f"{_fmt(sft_converged_time(env.W, env.K, env.L))}")
    print(f"  P(back|fwd) {s['p_back_fwd']:.3g}   P(back|bwd) {s['p_back_bwd']:.3g}   "
          f"hub max/min {s['hub_max_over_min']:.3g}")
    if extra:
        print(f"  {extra}")
    print(f"  {time.perf_counter() - t0:.1f} s")
    if args.out:
        blob = {"W": env.W, "K": env.K, "L": env.L, "method": args.method, "seed": args.seed,
                "config": dataclasses.asdict(cfg), "theta_hub": pol.theta_hub.tolist(), "theta": pol.theta.tolist(),
                "expected_steps": ht.value}
        with open(args.out, "w") as fh:
            json.dump(blob, fh, indent=1)
        print(f"  policy written to {args.out}")
    return 0


FIELD_HELP = {
    "sft_steps": "Adam steps of SFT on golden shortest paths",
    "sft_lr": "Adam learning rate of SFT",
    "sft_batch": "golden paths per SFT step with --sft-mode sampled",
    "rl_steps": "Adam steps of the exact policy-gradient flow (rlvr-exact)",
    "rl_lr": "Adam learning rate of rlvr-exact and of REINFORCE (rlvr, distill*)",
    "reinforce_episodes": "REINFORCE episodes in total (rlvr, distill*)",
    "reinforce_batch": "episodes per REINFORCE update; the advantage is reward minus the batch mean",
    "t_max_factor": "REINFORCE horizon T_max = factor x optimal steps; success within T_max earns 1 - steps/T_max",
    "distill_traces": "successful teacher traces the student is fitted to (distill*)",
    "distill_steps": "Adam steps of the student's maximum-likelihood fit (distill*)",
    "distill_lr": "Adam learning rate of the student's fit (distill*)",
}
"""Help lines of the training flags (the fields of ``MazeConfig``); a field without one gets its default only."""
EXAMPLES = """\
examples:
  agentmill maze solve --W 4 --K 6 --L 2 --policy sft --mc 20000
  agentmill maze train --method rlvr-exact --W 4 --K 5 --L 2 --out policy.json
  agentmill maze train --method distill-stripped --W 3 --K 4 --seed 1"""


def register(sub) -> None:
    from agentmill.methods.backtrack_maze.config import MazeConfig

    maze = sub.add_parser("maze", help="E163 path-star maze: exact hitting times, SFT / RLVR / distillation",
                          description="A path-star maze: W arms of depth K from a hub, L parallel forward edges per "
                                      "step, one arm ends at\nthe goal. Tabular policies over (depth, facing); E[T] is "
                                      "the exact expected number of steps to the goal.",
                          epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    msub = maze.add_subparsers(dest="maze_command", required=True,
                               help="the subcommand ('agentmill maze SUBCOMMAND -h' shows its flags)")

    sp = msub.add_parser("solve", help="exact expected steps of a reference policy")
    _add_maze_args(sp)
    sp.add_argument("--policy", choices=POLICIES, default="base",
                    help="base: uniform walk; sft: SFT-converged (P(back|fwd)=0); optimal: the RLVR limit")
    sp.add_argument("--mc", type=int, default=None, metavar="EPISODES",
                    help="also estimate E[T] by Monte Carlo over EPISODES episodes (>= 2)")
    sp.set_defaults(fn=cmd_solve)

    sp = msub.add_parser("train", help="train from the uniform base and report the exact expected steps")
    _add_maze_args(sp)
    sp.add_argument("--method", choices=METHODS, required=True,
                    help="sft: cross-entropy on golden shortest paths; rlvr-exact: exact policy-gradient flow on "
                         "log E[T]; rlvr: sampled REINFORCE; distill: REINFORCE teacher, then a fresh student fitted "
                         "to its successful traces; distill-stripped: the same on each trace's last segment from the "
                         "hub only")
    sp.add_argument("--sft-mode", choices=("exact", "sampled"), default="exact",
                    help="with --method sft: exact (expected counts over all golden paths, default) or sampled "
                         "(--sft-batch paths per step)")
    sp.add_argument("--out", default=None, help="write the trained logits as JSON")
    for f in dataclasses.fields(MazeConfig):
        if f.name == "mc_episodes":
            continue
        sp.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=type(f.default), default=f.default,
                        help=f"{FIELD_HELP[f.name]} (default {f.default})" if f.name in FIELD_HELP
                        else f"(default {f.default})")
    sp.set_defaults(fn=cmd_train, mc_episodes=MazeConfig().mc_episodes)
