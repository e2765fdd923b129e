"""``agentmill bayes-ship``: sample synthetic candidate records, calibrate a controller from labelled records, replay
policies over them, print a regime map and explain one decision (docs/methods/bayes_ship.md). A thin face over
``agentmill.methods.bayes_ship``."""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  agentmill bayes-ship synth --world W-C --n 200 --seed 0 --out cand.jsonl
  agentmill bayes-ship calibrate --records cand.jsonl --out calib.json
  agentmill bayes-ship replay --records cand.jsonl --calib calib.json --policies all --cost R=100,c_ver=30,c_gen=5,L0=1,L2=2,L3=3,L4=2
  (then regime-map --calib calib.json --c-ver 2:150:12, and explain --calib calib.json --belief 0.3)
"""


def _cost(text: str, calib=None, *, c_ver: float | None = None):
    """R=…,c_ver=…,c_gen=…,L0=… → CostModel; critic costs not given default to 1 (with a note)."""
    from agentmill.methods.bayes_ship import CostModel

    kw: dict = {}
    critic: dict[str, float] = {}
    for item in [t for t in text.split(",") if t.strip()]:
        if "=" not in item:
            raise ValueError(f"--cost expects key=value items, got {item!r}")
        k, v = (s.strip() for s in item.split("=", 1))
        try:
            val = float(v)
        except ValueError:
            raise ValueError(f"--cost {k}={v!r}: not a number") from None
        if k in ("R", "c_ver", "c_gen", "wrong_ship_loss"):
            kw[k] = val
        else:
            critic[k] = val
    if c_ver is not None:
        kw["c_ver"] = c_ver
    if calib is not None:
        unknown = [k for k in critic if k not in calib.critics]
        if unknown:
            raise ValueError(f"--cost names critic(s) {unknown} that the calibration does not have "
                             f"({sorted(calib.critics)})")
        for k in calib.critics:
            critic.setdefault(k, 1.0)
    return CostModel(critic_costs=critic or {"L0": 1.0, "L2": 2.0, "L3": 5.0}, **kw)


def _calib(path: str):
    from agentmill.cli.files import existing_file
    from agentmill.methods.bayes_ship import Calibration

    return Calibration.from_json(existing_file(path, "--calib").read_text(encoding="utf-8"))


def cmd_synth(args: argparse.Namespace) -> int:
    from agentmill.cli.files import output_path
    from agentmill.core.records import write_text_atomic
    from agentmill.methods.bayes_ship.synthetic import MEASURED_KERNEL, WORLDS, sample_trajectories

    w = WORLDS[args.world]
    if args.kernel == "measured":
        w = w.with_kernel(MEASURED_KERNEL, "+kernel")
    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    trajs = sample_trajectories(w, args.n, args.seed)
    out = output_path(args.out, "--out")
    write_text_atomic(out, "".join(r.to_json() + "\n" for t in trajs for r in t))
    print(f"wrote {sum(len(t) for t in trajs)} candidate records of {args.n} instances ({w.name}) to {out}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from agentmill.cli.files import existing_file, output_path
    from agentmill.core.records import write_text_atomic
    from agentmill.methods.bayes_ship.calibration import calibrate, iid_kernel
    from agentmill.methods.bayes_ship.replay import read_records

    recs = read_records(existing_file(args.records, "--records"))
    critics = [c for c in args.critics.split(",") if c] if args.critics else sorted({k for r in recs
                                                                                   for k in r.critics})
    cal = calibrate(recs, critics)
    if args.kernel == "iid":
        cal = iid_kernel(cal)
    out = output_path(args.out, "--out")
    write_text_atomic(out, cal.to_json())
    print(f"prior {cal.prior:.3f} (n={cal.prior_n}); kernel P_fix {cal.kernel.p_fix:.3f} P_break "
          f"{cal.kernel.p_break:.3f} ({cal.kernel.source}, {cal.kernel.n_pairs} pairs)")
    for k, c in cal.critics.items():
        (l1, h1), (l0, h0) = c.ci()
        print(f"  {k:<12} P(pass|ok) {c.p_pass_y1:.3f} [{l1:.3f}, {h1:.3f}]  P(pass|wrong) {c.p_pass_y0:.3f} "
              f"[{l0:.3f}, {h0:.3f}]  gap {c.gap:+.3f}")
    print(f"wrote {out}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from agentmill.cli.files import existing_file
    from agentmill.methods.bayes_ship import BayesShipConfig
    from agentmill.methods.bayes_ship.baselines import all_pipelines, give_up, paper_baselines
    from agentmill.methods.bayes_ship.calibration import calibrate
    from agentmill.methods.bayes_ship.core import DPController, GreedyController
    from agentmill.methods.bayes_ship.replay import by_instance, compare_policies, read_records

    recs = read_records(existing_file(args.records, "--records"))
    trajs = by_instance(recs)
    names = sorted({k for r in recs for k in r.critics})
    cal = _calib(args.calib) if args.calib else calibrate(recs, names)
    if not args.calib:
        print("note: no --calib: calibrated on the replayed records themselves (optimistic; calibrate on a "
              "separate split)")
    cost = _cost(args.cost, cal)
    J = max(len(t) for t in trajs)
    cfg = BayesShipConfig(max_candidates=J)
    pols: list = [DPController(cal, cost, BayesShipConfig(controller="dp", max_candidates=J)),
                  GreedyController(cal, cost, cfg)] + paper_baselines(list(cal.critics), J) + [give_up()]
    if args.policies == "all":
        pols += [p for p in all_pipelines(list(cal.critics), J) if p.name not in {q.name for q in pols}]
    elif args.policies != "paper":
        want = set(args.policies.split(","))
        pols = [p for p in pols if p.name in want]
        if not pols:
            raise ValueError(f"--policies matched nothing: {sorted(want)}")
    table = compare_policies(trajs, pols, cost, n_boot=args.n_boot, seed=args.seed)
    print(f"{len(trajs)} instances, cost R={cost.R:g} c_ver={cost.c_ver:g} c_gen={cost.c_gen:g} θ={cost.theta:.3g}")
    print(table.to_text())
    return 0


def _c_ver_grid(text: str) -> list[float]:
    import numpy as np

    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--c-ver expects LO:HI:N, got {text!r}")
    lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
    if not (0 < lo < hi) or n < 1:
        raise ValueError(f"--c-ver {text!r}: need 0 < LO < HI and N >= 1")
    return list(np.geomspace(lo, hi, n))


def cmd_regime_map(args: argparse.Namespace) -> int:
    from agentmill.cli.files import output_path
    from agentmill.core.records import write_text_atomic
    from agentmill.methods.bayes_ship.regimes import regime_map
    from agentmill.methods.bayes_ship.synthetic import SyntheticWorld

    cal = _calib(args.calib)
    cost = _cost(args.cost, cal)
    world = SyntheticWorld("calibrated", cal.prior, {k: (c.p_pass_y1, c.p_pass_y0) for k, c in cal.critics.items()},
                           dict(cost.critic_costs), cost.c_gen, args.max_candidates, cal.kernel)
    thetas = [c / cost.R for c in _c_ver_grid(args.c_ver)]
    m = regime_map(world, thetas=thetas, R=cost.R)
    print("exact utilities, taking the calibration as the truth (a map of your costs, not a measurement):")
    print(m.to_text())
    if args.html:
        out = output_path(args.html, "--html")
        write_text_atomic(out, m.to_html())
        print(f"wrote {out}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from agentmill.methods.bayes_ship import BayesShipConfig, decide, purchase_band
    from agentmill.methods.bayes_ship.core import max_voi, voi

    cal = _calib(args.calib)
    cost = _cost(args.cost, cal)
    if not 0 <= args.belief <= 1:
        raise ValueError(f"--belief must be in [0, 1], got {args.belief}")
    used = [u for u in args.used.split(",") if u] if args.used else []
    unknown = [u for u in used if u not in cal.critics]
    if unknown:
        raise ValueError(f"--used names unknown critic(s) {unknown}; calibrated: {sorted(cal.critics)}")
    d = decide(args.belief, cost, cal, used=used, candidates=args.candidate,
               cfg=BayesShipConfig(controller=args.controller))
    print(d.explanation)
    for k, v in sorted(d.q.items(), key=lambda kv: -kv[1]):
        print(f"  Q[{k}] = {v:.3f}")
    for k, c in cal.critics.items():
        lo, hi = purchase_band(c, cost.theta)
        print(f"  {k}: VOI {voi(args.belief, c, cost):.3f}, max VOI {max_voi(c, cost):.3f}, cost "
              f"{cost.critic_costs[k]:g}, purchase band ({lo:.3f}, {hi:.3f})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("bayes-ship", help="Bayesian verify-or-ship control: calibrate, replay, regime map, explain",
                        description="A belief over critic outcomes and a controller that decides whether to run a "
                                    "critic, verify,\nship, generate another candidate or give up.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="bayes_ship_cmd", required=True,
                           help="the subcommand ('agentmill bayes-ship SUBCOMMAND -h' shows its flags)")
    cost_help = ("costs as key=value items: R, c_ver, c_gen, wrong_ship_loss, and one per critic name "
                 "(default R=100, c_gen=5, c_ver=30; a calibrated critic without a cost costs 1)")

    s = ps.add_parser("synth", help="sample candidate records (JSONL) from a synthetic world with known answers")
    s.add_argument("--world", default="W-C", choices=("W-A", "W-B", "W-C"), help="synthetic world (default W-C)")
    s.add_argument("--kernel", default="iid", choices=("iid", "measured"),
                   help="refinement kernel: iid (fresh samples) or measured-style (P_fix 0.22, P_break 0.16)")
    s.add_argument("--n", type=int, default=200, help="instances, 5 candidates each (default 200)")
    s.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    s.add_argument("--out", required=True, help="output JSONL of candidate records")
    s.set_defaults(fn=cmd_synth)

    c = ps.add_parser("calibrate", help="fit prior, critic likelihoods and kernel from labelled candidate records")
    c.add_argument("--records", required=True, help="candidate records JSONL (agentmill.bayes_ship.candidate/1)")
    c.add_argument("--critics", default="", help="comma-separated critic names (default: every critic in the "
                                                 "records)")
    c.add_argument("--kernel", default="pairs", choices=("pairs", "iid"),
                   help="kernel from consecutive candidate pairs (default) or the IID kernel")
    c.add_argument("--out", required=True, help="output calibration JSON")
    c.set_defaults(fn=cmd_calibrate)

    r = ps.add_parser("replay", help="replay the Bayesian controllers and the baselines over recorded candidates")
    r.add_argument("--records", required=True, help="candidate records JSONL")
    r.add_argument("--calib", default="", help="calibration JSON (default: calibrate on the records, optimistic)")
    r.add_argument("--policies", default="paper",
                   help="'paper' (Bayesian + the paper's baselines), 'all' (+ every fixed pipeline) or a "
                        "comma-separated list of policy names")
    r.add_argument("--cost", default="R=100,c_ver=30,c_gen=5", help=cost_help)
    r.add_argument("--n-boot", type=int, default=1000, help="paired bootstrap resamples (default 1000)")
    r.add_argument("--seed", type=int, default=42, help="bootstrap seed (default 42)")
    r.set_defaults(fn=cmd_replay)

    m = ps.add_parser("regime-map", help="which policy is best over a range of verification costs (exact, taking "
                                         "the calibration as the truth)")
    m.add_argument("--calib", required=True, help="calibration JSON")
    m.add_argument("--cost", default="R=100,c_gen=5", help=cost_help + "; c_ver comes from --c-ver")
    m.add_argument("--c-ver", default="2:150:12", help="verification costs LO:HI:N, log-spaced (default 2:150:12)")
    m.add_argument("--max-candidates", type=int, default=5, help="candidates per episode J (default 5)")
    m.add_argument("--html", default="", help="also write the map as an HTML table to this file")
    m.set_defaults(fn=cmd_regime_map)

    e = ps.add_parser("explain", help="one decision at a given belief, with every Q value and each critic's VOI")
    e.add_argument("--calib", required=True, help="calibration JSON")
    e.add_argument("--belief", type=float, required=True, help="belief that the current candidate is correct")
    e.add_argument("--used", default="", help="comma-separated critics already run on this candidate")
    e.add_argument("--candidate", type=int, default=1, help="which candidate this is, 1-based (default 1)")
    e.add_argument("--controller", default="greedy", choices=("greedy", "dp"), help="controller (default greedy)")
    e.add_argument("--cost", default="R=100,c_ver=30,c_gen=5", help=cost_help)
    e.set_defaults(fn=cmd_explain)



