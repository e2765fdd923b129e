"""E165 G-9 and PERF-1..4 (project targets [R]): what the graph bookkeeping costs, measured side by side in one run.

- **PERF-1** env steps/s of KeyDoor vs TextWorld, uniform-random policy, one process.
- **PERF-2** ``g2po_advantages`` wall time per 1k steps at ~1k, 10k and 100k steps (groups of 8 × 30 steps with
  repeated states), and how far from linear it is (max/min of the per-1k times).
- **PERF-3** ``gigpo_advantages`` against a plain row-by-row reference loop with the same outputs (checked to
  1e-12) at 10k steps.
- **PERF-4 / G-9** (graph + advantages) / rollout wall time with a tabular softmax policy, on KeyDoor (reported)
  and TextWorld (claim < 1 %). The LM row (< 0.5 %, G-8 data) is not measured here: the LM arm is
  not built.

Every claim is a timing, so each is measured ``repeats`` times and judged on the geometric mean with its Student-t
interval over the repetitions (``core.stats.repeats_estimate``; issue 24: one timing is never a verdict). A ratio is
formed inside a repetition from two timings taken back to back (KeyDoor and TextWorld chunks alternate; reference
and vectorised GiGPO alternate), so machine noise hits both of its sides; PERF-2's max and max/min are taken over
the sizes of one repetition. The machine is shared with other jobs; it and the load are named in the record.
"""

from __future__ import annotations

import os
import platform
import random
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.core.types import StepTable
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv
from agentmill.envs.policies import SoftmaxTablePolicy
from agentmill.envs.rollout import collect_groups
from agentmill.experiments.e165_g2po import PAPER
from agentmill.experiments.e165_g2po.keydoor_groups import KEY, KeyDoorFactory, keydoor_tasks
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.g2po import build_state_graph, g2po_advantages, gigpo_advantages
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig
from agentmill.methods.g2po.keys import ExactKey, StateKeyFn


@dataclass(frozen=True)
class Setup:
    n_layouts: int = 16
    """KeyDoor layouts (the G-5 task set)."""
    layout_seed: int = 0
    """First layout generation seed."""
    keydoor_steps: int = 50_000
    """Random-policy steps timed on KeyDoor (PERF-1), in ``repeats`` chunks."""
    tw_steps: int = 1000
    """Random-policy steps timed on TextWorld (PERF-1), in ``repeats`` chunks; 0 skips every TextWorld row."""
    tw_games: int = 2
    """TextWorld games for PERF-1/PERF-4 (generated with tw-make, cached)."""
    tw_seed0: int = 1000
    """First tw-make seed."""
    sizes: tuple[int, ...] = (4, 42, 417)
    """PERF-2 table sizes in groups of 8 × 30 steps (960, 10,080 and 100,080 rows)."""
    ref_groups: int = 42
    """PERF-3 table size in groups (10,080 rows)."""
    overhead_groups: int = 64
    """KeyDoor groups of 8 rollouts for the PERF-4 ratio, split over the ``repeats`` rollout batches."""
    repeats: int = 3
    """Timing repetitions: every claim's interval is over them (3 at least for a verdict)."""
    seed: int = 1000
    """Seed of the synthetic tables and rollouts."""


SETUPS = {
    "smoke": Setup(n_layouts=4, keydoor_steps=2000, tw_steps=0, sizes=(2, 8), ref_groups=4, overhead_groups=8,
                   repeats=2),
    # quick: TextWorld rollouts dominate (~5 s per PERF-4 batch of 8 × 40 steps, three batches for the interval), so
    # PERF-1's TextWorld chunks and PERF-4's KeyDoor groups are cut to keep the run at its old length
    "quick": Setup(tw_steps=150, tw_games=1, overhead_groups=24),
    "full": Setup(repeats=5),
}

CLAIMS = (
    Claim("G-9", "Graph bookkeeping is negligible next to rollouts: (graph + advantages) / rollout wall time < 1 % "
          "with a tabular policy on TextWorld.", "[S] '< 0.5 % extra compute'; threshold [R]",
          "< 0.5 % (LM rollouts)", "tw_overhead_ratio", "<=", 0.01),
    Claim("PERF-1a", "KeyDoor runs ≥ 10,000 random-policy steps/s on one core.", "[R] project target", "—",
          "keydoor_steps_per_s", ">=", 10_000),
    Claim("PERF-1b", "KeyDoor is ≥ 50× faster than TextWorld per step.", "[R] project target",
          "not reported (our design estimate: TextWorld ≈ 100 steps/s)", "keydoor_over_textworld_speed", ">=", 50),
    Claim("PERF-2a", "g2po_advantages costs ≤ 5 ms per 1k steps at 1k, 10k and 100k steps (the worst of the three).",
          "[R] project target", "—", "g2po_ms_per_1k_max", "<=", 5.0),
    Claim("PERF-2b", "g2po_advantages scales within 1.5× of linear (max/min of the per-1k times).", "[R] target",
          "—", "g2po_linearity", "<=", 1.5),
    Claim("PERF-3", "gigpo_advantages is ≥ 10× faster than a row-by-row reference loop with the same outputs at "
          "10k steps.", "[R] project target (verl-agent's per-row loop)", "—", "gigpo_speedup_vs_loop", ">=", 10),
)


# ---------------------------------------------------------------------------------------------------------------
# synthetic tables and the reference loop


def synthetic_table(groups: int, seed: int, n: int = 8, length: int = 30, n_states: int = 40) -> StepTable:
    """``groups`` groups of ``n`` random walks of ``length`` steps over ``n_states`` ~60-character observations
    (so states repeat, as in KeyDoor); reward 1 on the last step of a random half of the trajectories."""
    rng = np.random.default_rng(seed)
    S = groups * n * length
    state = rng.integers(0, n_states, size=S)
    names = np.array([f"-= Room {k:02d} =- You see a lamp and a book. Exits: north, south." for k in range(n_states)],
                     dtype=object)
    obs = names[state]
    nxt = np.empty(S, dtype=object)
    nxt[:-1] = obs[1:]
    last = (np.arange(S) % length) == length - 1
    nxt[last] = "-= Done =-"
    win = np.repeat(rng.random(groups * n) < 0.5, length)
    reward = np.where(last & win, 1.0, 0.0)
    traj = np.arange(S) // length
    return StepTable(group_id=[f"g{k}" for k in traj // n], traj_id=[f"r{k % n}" for k in traj],
                     t=np.arange(S) % length, obs=obs, next_obs=nxt, action=np.full(S, "go", dtype=object),
                     reward=reward, end=np.where(last, 1, 0), success=win)


def reference_gigpo(table: StepTable, key_fn: StateKeyFn, cfg: GiGPOConfig = GiGPOConfig()) -> np.ndarray:
    """GiGPO (norm "mean") computed row by row in plain Python, in the manner of verl-agent's per-row loops: dicts
    of lists per group and per anchor state. Singleton groups/anchors and all-equal sets give 0 (this package's
    documented convention)."""
    rows = range(len(table))
    gid, tid = table.group_id.tolist(), table.traj_id.tolist()
    rew, last = table.reward.tolist(), table.is_last.tolist()
    ret: dict[tuple[str, str], float] = defaultdict(float)
    for r in rows:
        ret[(gid[r], tid[r])] += rew[r]
    by_group: dict[str, list[float]] = defaultdict(list)
    for (g, _), R in ret.items():
        by_group[g].append(R)

    def centred(x: float, xs: list[float]) -> float:
        if len(xs) < 2 or all(v == xs[0] for v in xs):
            return 0.0
        return x - sum(xs) / len(xs)

    G = [0.0] * len(table)
    acc = 0.0
    for r in reversed(rows):
        acc = rew[r] + (cfg.gamma * acc if not last[r] else 0.0)
        G[r] = acc
    anchors: dict[tuple[str, Any], list[float]] = defaultdict(list)
    keys = [key_fn(o, i) for o, i in zip(table.obs, table.info)]
    for r in rows:
        anchors[(gid[r], keys[r])].append(G[r])
    out = np.empty(len(table))
    for r in rows:
        ep = centred(ret[(gid[r], tid[r])], by_group[gid[r]])
        out[r] = ep + cfg.omega * centred(G[r], anchors[(gid[r], keys[r])])
    return out


def _seconds(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class _RandomWalker:
    """Uniform-random steps on one environment, resetting when an episode ends (the resets are part of the cost, as
    in an RL loop); :meth:`steps_per_s` times the next ``n`` steps, so one walker yields several timed chunks."""

    def __init__(self, env: Any, seed: int) -> None:
        self.env, self.rng = env, random.Random(seed)
        _, self.info = env.reset(seed=seed)

    def steps_per_s(self, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            _, _, term, trunc, self.info = self.env.step(self.rng.choice(self.info["admissible_commands"]))
            if term or trunc:
                _, self.info = self.env.reset()
        return n / (time.perf_counter() - t0)


def _overhead(factory: Any, tasks: list, n: int, max_steps: int | None, seed: int) -> tuple[float, float, float]:
    """(rollout s, graph + advantages s, ratio) for one batch of groups with an untrained tabular policy; the
    advantage side is the median of 3 calls (one call on a small batch is a few ms, near the timer's noise)."""
    t0 = time.perf_counter()
    table, _, _ = collect_groups(factory, SoftmaxTablePolicy(), tasks, n, max_steps, seed=seed)
    roll = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adv = float(np.median([_seconds(lambda: g2po_advantages(table, KEY)) for _ in range(3)]))
    return roll, adv, adv / roll


def _overheads(factory: Any, tasks: list, n: int, max_steps: int | None, s: Setup) -> dict[str, list[float]]:
    """:func:`_overhead` over ``s.repeats`` rollout batches, each with its own seed."""
    rows = [_overhead(factory, tasks, n, max_steps, s.seed + r) for r in range(s.repeats)]
    return {"rollout_s": [r[0] for r in rows], "g2po_s": [r[1] for r in rows], "ratio": [r[2] for r in rows]}


def _rep(xs: list[float]) -> Estimate:
    """Geometric mean of positive timings or ratios, one per repetition, with its t-interval."""
    return repeats_estimate(xs, log=True)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    out: dict[str, Estimate] = {}
    tasks = keydoor_tasks(s)
    R = s.repeats
    # PERF-1: KeyDoor and TextWorld chunks alternate, so each KeyDoor / TextWorld ratio is taken under one load
    ctx.progress("PERF-1 env speed", 0, 4)
    kd = _RandomWalker(KeyDoorEnv(tasks[0], KeyDoorConfig()), s.seed)
    games: list = []
    kd_rates, tw_rates = [], []
    if s.tw_steps > 0:
        from agentmill.envs.textworld_env import GamePool, TextWorldEnv, make_games

        games = make_games(ctx.work_dir / "tw_games", s.tw_games, seed0=s.tw_seed0, calibrate=None)
        env = TextWorldEnv(games[0], max_steps=40)
        try:
            tw = _RandomWalker(env, s.seed)
            for r in range(R):
                if r % 2 == 0:
                    kd_rates.append(kd.steps_per_s(s.keydoor_steps // R))
                    tw_rates.append(tw.steps_per_s(s.tw_steps // R))
                else:
                    tw_rates.append(tw.steps_per_s(s.tw_steps // R))
                    kd_rates.append(kd.steps_per_s(s.keydoor_steps // R))
        finally:
            env.close()
        out["textworld_steps_per_s"] = _rep(tw_rates)
        out["keydoor_over_textworld_speed"] = _rep([k / t for k, t in zip(kd_rates, tw_rates)])
    else:
        kd_rates = [kd.steps_per_s(s.keydoor_steps // R) for _ in range(R)]
    out["keydoor_steps_per_s"] = _rep(kd_rates)
    # PERF-2: every size once per repetition, so the max and max/min of one repetition share its load
    ctx.progress("PERF-2 scaling", 1, 4)
    tables = [synthetic_table(g, s.seed) for g in s.sizes]
    g2po_cfg = G2POConfig()
    per_1k = np.zeros((R, len(tables)))
    graph_1k = np.zeros((R, len(tables)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # low-merge-rate warnings are not what is being timed
        for tb in tables:  # warm-up (allocator, caches), not timed
            g2po_advantages(tb, ExactKey())
        for r in range(R):
            for j, tb in enumerate(tables):
                graph_1k[r, j] = 1e6 * _seconds(lambda: build_state_graph(
                    tb, ExactKey(), gamma=g2po_cfg.gamma, visit=g2po_cfg.visit, truncation=g2po_cfg.truncation)
                ) / len(tb)
                per_1k[r, j] = 1e6 * _seconds(lambda: g2po_advantages(tb, ExactKey())) / len(tb)
    for j, tb in enumerate(tables):
        out[f"g2po_ms_per_1k_at_{len(tb)}"] = _rep(per_1k[:, j].tolist())
        out[f"graph_ms_per_1k_at_{len(tb)}"] = _rep(graph_1k[:, j].tolist())
    out["g2po_ms_per_1k_max"] = _rep(per_1k.max(axis=1).tolist())
    out["g2po_linearity"] = _rep((per_1k.max(axis=1) / per_1k.min(axis=1)).tolist())
    # PERF-3: reference loop and vectorised GiGPO alternate; one paired ratio per repetition
    ctx.progress("PERF-3 GiGPO vs reference loop", 2, 4)
    table = synthetic_table(s.ref_groups, s.seed + 1)
    key = ExactKey()
    ref = reference_gigpo(table, key)
    vec = gigpo_advantages(table, key).advantages
    out["gigpo_ref_max_abs_diff"] = Estimate.exact(float(np.max(np.abs(ref - vec))))
    t_ref, t_vec = [], []
    for r in range(R):
        for arm in (("ref", "vec") if r % 2 == 0 else ("vec", "ref")):
            if arm == "ref":
                t_ref.append(_seconds(lambda: reference_gigpo(table, key)))
            else:
                t_vec.append(_seconds(lambda: gigpo_advantages(table, key)))
    out["gigpo_speedup_vs_loop"] = _rep([a / b for a, b in zip(t_ref, t_vec)])
    out["gigpo_ms_per_1k"] = _rep([t * 1e6 / len(table) for t in t_vec])
    out["gigpo_loop_ms_per_1k"] = _rep([t * 1e6 / len(table) for t in t_ref])
    # PERF-4 / G-9: one ratio per rollout batch (KeyDoor's groups split over the batches; TextWorld's few tasks
    # rolled out once per batch)
    ctx.progress("PERF-4 overhead ratios", 3, 4)
    per = max(1, s.overhead_groups // R)
    ratios: dict[str, dict[str, list[float]]] = {}
    ratios["keydoor"] = _overheads(KeyDoorFactory(KeyDoorConfig()), [tasks[k % len(tasks)] for k in range(per)], 8,
                                   None, s)
    if games:
        pool = GamePool(games, max_steps=40)
        ratios["tw"] = _overheads(pool, pool.tasks, 8, 40, s)
    for env_name, r in ratios.items():
        out[f"{env_name}_rollout_s"], out[f"{env_name}_g2po_s"] = _rep(r["rollout_s"]), _rep(r["g2po_s"])
        out[f"{env_name}_overhead_ratio"] = _rep(r["ratio"])
    ctx.data["machine"] = {"node": platform.node(), "processor": platform.processor(), "python":
                           platform.python_version(), "cpu_count": os.cpu_count(), "loadavg": os.getloadavg()}
    ctx.data["perf1"] = {"keydoor_steps_per_s": kd_rates, "textworld_steps_per_s": tw_rates}
    ctx.data["perf2"] = {"rows": [len(tb) for tb in tables], "ms_per_1k": np.median(per_1k, axis=0).tolist(),
                         "ms_per_1k_per_rep": per_1k.tolist()}
    ctx.data["perf3"] = {"ref_s": t_ref, "vec_s": t_vec}
    ctx.data["perf4"] = ratios
    ctx.data["ratios"] = {k: v.value for k, v in out.items() if k.endswith("overhead_ratio")}
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    p = data["perf2"]
    ax1.plot(p["rows"], p["ms_per_1k"], "o-")
    ax1.axhline(5, ls="--", color="gray", label="target 5 ms / 1k steps")
    ax1.set_xscale("log")
    ax1.set_xlabel("steps in the table")
    ax1.set_ylabel("g2po_advantages ms per 1k steps")
    ax1.set_title("PERF-2 scaling")
    ax1.legend(fontsize=7)
    r = data["ratios"]
    names = list(r)
    ax2.bar(range(len(names)), [100 * r[n] for n in names])
    ax2.set_xticks(range(len(names)), [n.replace("_overhead_ratio", "") for n in names])
    ax2.axhline(1, ls="--", color="gray", label="1 % (tabular TextWorld target)")
    ax2.set_ylabel("(graph + advantages) / rollout time, %")
    ax2.set_title("PERF-4 / G-9 overhead, tabular policy")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path = out / "g9_overhead.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e165.g2po_overhead",
    quick_budget_s=25,
    title="E165 G-9 / PERF-1..4: graph bookkeeping cost vs rollouts, estimator scaling",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Wall-clock medians on a 2-core machine shared with other jobs (noisy), one process. Tabular "
               "softmax policies only: with a tabular policy the rollout is nearly free, so the ratio is an upper "
               "bound on the LM case; the paper's < 0.5 % [S] concerns LM rollouts (G-8, not built here).",
)
