"""E170 B-8: does replay over recorded candidate pools predict live control? Live verify-or-ship episodes on real
repositories against the replay prediction for the same instances.

Instances and pools are those of ``e170.bayes_ship_pyrepo`` (seeded bugs in cachetools and toolz; each candidate
pre-measured once: critic outcomes and seconds, oracle label and seconds; at full the pools are read from that
experiment's work dir when its setup matches, else collected here). One cost cell, fixed before any run: θ = c_ver /
R = 0.2 (R = 5 mean oracle seconds; the cell B-9 deploys in) [R]. Costs are the pyrepo arm's: c_ver and c_k the mean
measured seconds, c_gen = c_ver / 6 [R]. The controller is the candidate-staged DP, calibrated by 2-fold
cross-fitting over instances (never on the instance it is scored on), kernel IID at the calibrated prior.

The generator is ``envs.pyrepo.PoolGenerator`` with a known IID kernel (b₀ = the pools' share correct, p_fix = b₀,
p_break = 1 − b₀), drawing without replacement from the instance's labelled pool.

- Replay prediction (per instance): the mean realized utility of ``replay.simulate_policy`` over ``orders`` pool
  orders drawn by the same generator (other seeds), charging the mean costs the controller plans with.
- Live (per instance, one episode): a ``core.Episode`` whose decisions are carried out for real: each critic is run
  on the candidate (pytest subsets in the sandbox, pyflakes, compile) and charged its measured wall seconds; verify
  runs the full oracle (sandboxed pytest) and is charged its measured wall seconds; each new candidate is drawn live
  from the generator and charged c_gen. Realized utility = R·[verified correct] − charged seconds.
- B-8: d_i = (live_i − replay_i) / R, paired over instances; 95 % paired-bootstrap interval over instances (B = 1000,
  seed 42), the interval method fixed before the run. Two parts, as the claim is written: the difference lies within
  ±10 % of R (the whole interval inside [−0.1, 0.1]) and the interval overlaps 0.

Diagnostics beside the claim: the same-draw replay (the live episode's own pool order replayed with mean costs) splits
live − replay into cost/outcome noise (live − same-draw) and generator-draw noise (same-draw − expected); agreement of
live critic and oracle outcomes with the pre-measured ones; measured vs planned seconds.
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, mean_estimate, paired_diff
from agentmill.experiments.e170_bayes_ship import PAPER
from agentmill.experiments.e170_bayes_ship.pool import CRITICS, measure_pool, read_rows, seeded_instances, trajectories
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    packages: tuple[str, ...] = ("cachetools==8.0.1", "toolz==1.2.0")
    """Corpus packages (``fixture`` = the in-code fixture package, no fetch)."""
    instances: tuple[int, ...] = (6, 4)
    """Seeded instances per package (the published pyrepo set)."""
    candidates: int = 4
    """Candidates per instance pool (as ``e170.bayes_ship_pyrepo``)."""
    theta: float = 0.2
    """The cost cell: θ = c_ver / R."""
    orders: int = 500
    """Generator draws per instance for the replay prediction (Monte Carlo)."""
    n_boot: int = 1000
    reps: int = 4
    """Live episodes per instance (fresh generator draws); an instance's live utility is their mean."""
    seed: int = 0
    judge: bool = True
    """False: a pipeline check; the claim's numbers are recorded unjudged."""


SETUPS = {"smoke": Setup(packages=("fixture",), instances=(1,), candidates=2, orders=50, n_boot=100, reps=1,
                   judge=False),
          "quick": Setup(packages=("fixture",), instances=(3,), candidates=3, orders=200, n_boot=200, reps=1,
                   judge=False),
          "full": Setup()}

CLAIMS = (
    Claim("E170-B8", "Replay predicts live control: live realized utility − replay prediction on the same instances "
          "(live Episode, PoolGenerator with a known kernel, real critics and oracle), as a fraction of R, lies within "
          "±10 % of R (paired-bootstrap 95 % CI over instances wholly inside [−0.1, 0.1]).", "[R]",
          "—", "b8_live_minus_replay_over_R", "in", -0.10, upper=0.10),
    Claim("E170-B8-zero", "... and its 95 % CI overlaps 0 (1 = it does).", "[R]", "—", "b8_ci_overlaps_zero", ">=", 1,
          judge_on="exact", exact_why="a yes/no property of the B-8 paired-bootstrap interval, which itself carries "
          "the sampling noise over instances"),
)

_CLAIM_METRICS = ("b8_live_minus_replay_over_R", "b8_ci_overlaps_zero")


def b8_estimates(live: np.ndarray, replay: np.ndarray, R: float, *, n_boot: int, seed: int = 42) -> dict[str, Estimate]:
    """The B-8 metrics from per-instance live and replay utilities (paired bootstrap of the mean of (live − replay) /
    R over instances) and whether that interval contains 0."""
    live, replay = np.asarray(live, float) / R, np.asarray(replay, float) / R
    d = paired_diff(live, replay, n_boot=n_boot, seed=seed)
    return {"b8_live_minus_replay_over_R": d,
            "b8_ci_overlaps_zero": Estimate.exact(float(d.lo <= 0.0 <= d.hi), n=len(live))}


def light_pool(rows: list[dict[str, Any]]) -> list[Any]:
    """The pool's candidates as label-only ``Candidate`` objects (for drawing orders without the files)."""
    from agentmill.envs.pyrepo import Candidate

    return [Candidate(r["instance_id"], r["candidate_id"], r["kind"], {}, "", y=int(bool(r["y"]))) for r in rows]


def draw_order(pool: list[Any], b0: float, seed: int) -> list[Any]:
    """The full order in which ``PoolGenerator`` (IID kernel at ``b0``, ``seed``) draws ``pool``."""
    from agentmill.envs.pyrepo import PoolGenerator

    gen = PoolGenerator(pool, b0=b0, p_fix=b0, p_break=1.0 - b0, seed=seed)
    out = []
    while (c := gen.next()) is not None:
        out.append(c)
    return out


def as_records(order: list[Any], by_id: dict[str, dict[str, Any]]) -> list[Any]:
    from agentmill.methods.bayes_ship.replay import CandidateRecord

    rs = [by_id[c.cand_id] for c in order]
    return [CandidateRecord(r["instance_id"], r["candidate_id"], j, dict(r["critics"]), bool(r["y"]), None,
                            dict(r["critic_s"]), r["oracle_s"], "", "pyrepo-pool", r["repo"], {"kind": r["kind"]})
            for j, r in enumerate(rs)]


def live_episode(controller: Any, calib: Any, cost: Any, *, task: Any, next_candidate: Any, critics: dict[str, Any],
                 oracle: Any, c_gen: float, max_candidates: int, max_actions: int = 64) -> dict[str, Any]:
    """One live episode: the controller's decisions carried out for real, each action charged what it measured.

    ``next_candidate() -> candidate | None``; ``critics[name].check(task, cand)`` -> outcome with ``passed`` and
    ``wall_s``; ``oracle(cand) -> (correct, wall seconds)``. Returns the episode result and a log of what ran."""
    from agentmill.methods.bayes_ship import Episode

    ep = Episode(controller, calib, cost, max_candidates=max_candidates)
    log: list[dict[str, Any]] = []
    cand = next_candidate()
    drawn = [] if cand is None else [cand.cand_id]
    if cand is None:
        ep.gave_up()
    for _ in range(max_actions):
        if ep.outcome != "running":
            break
        d = ep.next()
        if d.action == "critic":
            out = critics[d.critic].check(task, cand)
            ep.observe(d.critic, bool(out.passed), float(out.wall_s))
            log.append({"cand": cand.cand_id, "critic": d.critic, "passed": bool(out.passed), "s": float(out.wall_s)})
        elif d.action == "generate":
            nxt = next_candidate()
            if nxt is None:
                ep.gave_up()
                break
            cand = nxt
            drawn.append(cand.cand_id)
            ep.new_candidate(cost=c_gen)
        elif d.action == "verify":
            y, s = oracle(cand)
            ep.verified(bool(y), float(s))
            log.append({"cand": cand.cand_id, "oracle": bool(y), "s": float(s)})
        elif d.action == "ship":
            ep.shipped()
        else:
            ep.gave_up()
    if ep.outcome == "running":
        ep.gave_up()
    r = ep.result()
    return {"utility": r.utility, "costs": r.costs, "actions": r.actions, "outcome": r.outcome, "drawn": drawn,
            "log": log}


def _instances(s: Setup, work: Path) -> list[tuple[Any, Any, Any, list[Any]]]:
    """``(repo, critics, task, candidates)`` per seeded instance, in the pyrepo arm's order and selection."""
    return seeded_instances(s.packages, s.instances, seed=s.seed, candidates=s.candidates, work=work)


def _pool_rows(s: Setup, ctx: RunContext, insts: list[tuple[Any, Any, Any, list[Any]]]) -> list[dict[str, Any]]:
    """The pre-measured pools: ``e170.bayes_ship_pyrepo``'s (read, never written) when its work dir holds exactly
    these instances and candidates; otherwise measured here (resumable JSONL, the pyrepo arm's row format)."""
    want = {task.instance_id: [c.cand_id for c in cands] for _, _, task, cands in insts}
    if "fixture" not in s.packages:
        shared = read_rows(ctx.shared_work_dir("e170.bayes_ship_pyrepo") / f"candidates-{s.seed}.jsonl")
        got: dict[str, list[str]] = {}
        for r in shared:
            got.setdefault(r["instance_id"], []).append(r["candidate_id"])
        if all(got.get(iid) == ids for iid, ids in want.items()):
            ctx.data["pool_source"] = "shared with e170.bayes_ship_pyrepo"
            return [r for r in shared if r["instance_id"] in want]
    ctx.data["pool_source"] = "measured here"
    return measure_pool(insts, ctx.work_dir / f"pool-{s.seed}.jsonl",
                        lambda done, total: ctx.progress("pool candidates", done, total))


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _measure(s, ctx)


def _measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.core.seeding import rng_for
    from agentmill.envs.pyrepo import PoolGenerator, verify
    from agentmill.methods.bayes_ship import BayesShipConfig, CostModel
    from agentmill.methods.bayes_ship.calibration import calibrate, iid_kernel
    from agentmill.methods.bayes_ship.core import DPController
    from agentmill.methods.bayes_ship.replay import simulate_policy

    t0 = time.perf_counter()
    try:
        insts = _instances(s, ctx.work_dir)
        rows = _pool_rows(s, ctx, insts)
    except FileNotFoundError as e:
        ctx.data["precondition"] = f"precondition not met: pyrepo pool unavailable ({e})"
        return {}
    t_pool = time.perf_counter() - t0

    by_inst: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_inst.setdefault(r["instance_id"], []).append(r)
    iids = [t.instance_id for _, _, t, _ in insts]  # instance order (folds): the seeded order
    by_id = {r["candidate_id"]: r for r in rows}
    J = max(len(v) for v in by_inst.values())
    c_ver = float(np.mean([r["oracle_s"] for r in rows]))
    crit_s = {k: float(np.mean([r["critic_s"][k] for r in rows])) for k in CRITICS}
    c_gen = c_ver / 6
    R = c_ver / s.theta
    cost = CostModel(R=R, c_gen=c_gen, c_ver=c_ver, critic_costs=crit_s, unit="seconds")
    b0 = float(np.mean([r["y"] for r in rows]))
    cfg = BayesShipConfig(controller="dp", max_candidates=J)
    # 2-fold cross-fitted calibration over instances (as the pyrepo arm)
    trajs = {t[0].instance_id: t for t in trajectories(rows, s.seed)}
    fold = {iid: i % 2 for i, iid in enumerate(iids)}
    ctrl: dict[int, Any] = {}
    for f in (0, 1):
        train = [r for iid in iids if fold[iid] != f for r in trajs[iid]]
        if train:
            cal = iid_kernel(calibrate(train, list(CRITICS)))
            ctrl[f] = DPController(cal, cost, cfg)
    if len(ctrl) < 2:  # one instance: calibrate on itself (smoke only; never judged)
        cal = iid_kernel(calibrate([r for t in trajs.values() for r in t], list(CRITICS)))
        ctrl = {0: DPController(cal, cost, cfg), 1: DPController(cal, cost, cfg)}

    # (1) replay prediction: expected utility over generator draws, mean costs
    replay, live_seed = {}, {}
    for iid in iids:
        pool = light_pool(by_inst[iid])
        us = [simulate_policy(as_records(draw_order(pool, b0, 1 + k), by_id), ctrl[fold[iid]], cost).utility
              for k in range(s.orders)]
        replay[iid] = float(np.mean(us))
        live_seed[iid] = int(rng_for("bayes_ship.live.draw", iid, s.seed).integers(10_000, 2**31))
    # (2) live episodes
    episodes: list[dict[str, Any]] = []
    t1 = time.perf_counter()
    for repo, critics, task, cands in insts:
        iid = task.instance_id
        real = {c.cand_id: copy.deepcopy(c) for c in cands}
        pool_rows = by_inst[iid]
        if [r["candidate_id"] for r in pool_rows] != list(real):
            raise RuntimeError(f"{iid}: rebuilt candidates {list(real)} differ from the pool's "
                               f"{[r['candidate_id'] for r in pool_rows]}")
        for c in real.values():
            c.y = int(bool(by_id[c.cand_id]["y"]))  # the pre-measured label: what the generator's kernel reads

        def oracle(c: Any, task: Any = task, repo: Any = repo) -> tuple[bool, float]:
            v = verify(copy.deepcopy(c), task, repo)  # a copy: the pool keeps its pre-measured label
            return bool(v.y), float(v.oracle_wall_s or 0.0)

        for rep in range(s.reps):
            seed = live_seed[iid] + rep
            gen = PoolGenerator(list(real.values()), b0=b0, p_fix=b0, p_break=1.0 - b0, seed=seed)
            ep = live_episode(ctrl[fold[iid]], ctrl[fold[iid]].calib, cost, task=task, next_candidate=gen.next,
                              critics=critics, oracle=oracle, c_gen=c_gen, max_candidates=J)
            # the same draw, replayed with mean costs
            same_order = draw_order(light_pool(pool_rows), b0, seed)
            if [c.cand_id for c in same_order[:len(ep["drawn"])]] != ep["drawn"]:
                raise RuntimeError(f"{iid}: the live draw {ep['drawn']} is not the generator's order")
            same = simulate_policy(as_records(same_order, by_id), ctrl[fold[iid]], cost)
            agree_c = [e["passed"] == by_id[e["cand"]]["critics"][e["critic"]] for e in ep["log"] if "critic" in e]
            agree_o = [e["oracle"] == bool(by_id[e["cand"]]["y"]) for e in ep["log"] if "oracle" in e]
            planned = sum(cost.critic_costs[e["critic"]] if "critic" in e else c_ver for e in ep["log"])
            measured = sum(e["s"] for e in ep["log"])
            episodes.append({"instance_id": iid, "rep": rep, "repo": task.repo, "live": ep["utility"],
                             "replay": replay[iid], "same_draw_replay": same.utility,
                             "same_draw_actions": same.actions, "live_actions": ep["actions"],
                             "outcome": ep["outcome"], "costs": ep["costs"], "drawn": ep["drawn"], "log": ep["log"],
                             "critic_agree": agree_c, "oracle_agree": agree_o, "planned_s": planned,
                             "measured_s": measured, "seed": seed})
            ctx.progress("live episodes", len(episodes), len(iids) * s.reps)
    t_live = time.perf_counter() - t1
    per = {iid: [e for e in episodes if e["instance_id"] == iid] for iid in iids}
    per = {k: v for k, v in per.items() if v}
    live = np.array([np.mean([e["live"] for e in v]) for v in per.values()])  # per instance: mean over its episodes
    rep = np.array([replay[k] for k in per])
    same = np.array([np.mean([e["same_draw_replay"] for e in v]) for v in per.values()])
    out = b8_estimates(live, rep, R, n_boot=s.n_boot)
    out["b8_live_minus_same_draw_over_R"] = paired_diff(live / R, same / R, n_boot=s.n_boot, seed=42)
    out["b8_same_draw_minus_replay_over_R"] = paired_diff(same / R, rep / R, n_boot=s.n_boot, seed=42)
    out["b8_live_utility_over_R"] = mean_estimate(live / R, n_boot=s.n_boot, seed=42)
    out["b8_replay_utility_over_R"] = mean_estimate(rep / R, n_boot=s.n_boot, seed=42)
    ac = [a for e in episodes for a in e["critic_agree"]]
    ao = [a for e in episodes for a in e["oracle_agree"]]
    out["b8_live_outcome_agreement"] = Estimate.exact(float(np.mean(ac + ao)) if ac + ao else float("nan"),
                                                      n=len(ac + ao))
    ratio = [np.mean([e["measured_s"] / e["planned_s"] for e in v if e["planned_s"] > 0] or [np.nan])
             for v in per.values()]
    ratio = [r for r in ratio if np.isfinite(r)]
    if ratio:
        out["b8_measured_over_planned_seconds"] = mean_estimate(ratio, n_boot=s.n_boot, seed=42)
    ctx.data.update({"episodes": episodes, "R_seconds": R, "theta": s.theta, "b0": b0, "J": J,
                     "costs_seconds": {"c_ver": c_ver, "c_gen": c_gen, **crit_s}, "n_instances": len(per), "n_episodes": len(episodes),
                     "per_instance": [{"instance_id": k, "live": float(a), "replay": float(b), "same_draw": float(c)}
                                      for k, a, b, c in zip(per, live, rep, same)],
                     "pool_seconds": t_pool, "live_seconds": t_live, "orders": s.orders,
                     "interval": "paired bootstrap over instances, B = n_boot, seed 42, 95 % percentile"})
    if not s.judge:
        out = unjudged(out, _CLAIM_METRICS, f"pipeline check on {len(per)} fixture instance(s); the verdict "
                       "comes from the full run on cachetools and toolz", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    eps = data.get("episodes") or []
    if not eps:
        return []
    plt = pyplot()
    R = float(data["R_seconds"])
    x = np.array([e["replay"] for e in eps]) / R
    y = np.array([e["live"] for e in eps]) / R
    z = np.array([e["same_draw_replay"] for e in eps]) / R
    fig, ax = plt.subplots(figsize=(5, 5))
    lo, hi = min(x.min(), y.min(), z.min()) - 0.1, max(x.max(), y.max(), z.max()) + 0.1
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="y = x")
    ax.fill_between([lo, hi], [lo - 0.1, hi - 0.1], [lo + 0.1, hi + 0.1], color="grey", alpha=0.15,
                    label="±10 % of R")
    ax.scatter(x, y, s=12, alpha=0.4, label="live episode", zorder=3)
    ax.scatter(x, z, s=12, marker="x", color="C1", alpha=0.6, label="same draw, replayed", zorder=3)
    per = data.get("per_instance") or []
    if per:
        ax.scatter([p["replay"] / R for p in per], [p["live"] / R for p in per], s=60, facecolors="none",
                   edgecolors="C0", linewidths=1.5, label="instance (mean of its live episodes)", zorder=4)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("replay prediction (utility / R)")
    ax.set_ylabel("realized utility / R")
    ax.set_title(f"B-8: live vs replay per instance (θ = {data['theta']:g}, R = {R:.1f} s)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "b8_live_vs_replay.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e170.bayes_ship_live",
    quick_budget_s=45,
    quick_check="pipeline check on 3 instances of the in-code fixture package (pools measured, live episodes run); "
                "no verdict: it comes from the full run on cachetools and toolz",
    title="E170 live verify-or-ship control vs its replay prediction",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="10 seeded instances (cachetools 6, toolz 4; the design asked for 40), one live episode each at one "
               "cost cell (θ = 0.2); LM-free pool generator with a known kernel; costs are measured wall seconds, so "
               "the machine's load enters the live utilities (run alone).",
)
