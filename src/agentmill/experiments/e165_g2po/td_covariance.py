"""E165 G-2: correlated node values cancel noise in the TD error (arXiv:2606.22995 [A]; property P4 [D], g2po README).

Var δ = Var V̂(u) + Var V̂(v) − 2·Cov(V̂(u), V̂(v)). Visits that pass through u and then v share their suffix
returns, so Cov > 0 and the edge's TD error is less noisy than its two node values apart. Measured by resampling:
many independent groups of one task, each giving one (V̂u, V̂v, δ) per edge it realises.

Setup as G-1 (fully observable KeyDoor, fixed ε-oracle policy ε = 0.5, γ = 0.95). An edge is identified across
resamples by its task and its two keys. Edges present in ≥ 50 % of the resamples are judged; an edge passes when
Cov(V̂u, V̂v) > 0 **and** Var δ < Var V̂u + Var V̂v. Claim: ≥ 90 % of them pass (95 % CI from a bootstrap over
resamples).

Pre-registered exclusions [R]: edges into an absorbing node (V̂ ≡ 0 there, so Cov = 0 by definition, not by
noise) and self-loops u → u (Cov = Var V̂u, the inequality holds trivially: (γ − 1)²·Var < 2·Var). Both are
reported separately.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, percentile_estimate
from agentmill.envs.keydoor import layouts
from agentmill.envs.rollout import EpsilonOraclePolicy, collect_groups
from agentmill.experiments.e165_g2po import PAPER
from agentmill.experiments.e165_g2po.keydoor_groups import KEY, OBSERVABLE, KeyDoorFactory
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.g2po import build_state_graph
from agentmill.methods.g2po.graph import Terminal


@dataclass(frozen=True)
class Setup:
    n_layouts: int = 8
    """Tasks (layouts); each gets ``resamples`` independent groups."""
    layout_seed: int = 0
    """First layout generation seed."""
    resamples: int = 400
    """Independent groups per task (400 resampled groups [R])."""
    group_size: int = 8
    """Rollouts per group, N."""
    epsilon: float = 0.5
    """ε-oracle policy, as G-1."""
    gamma: float = 0.95
    """Discount."""
    min_presence: float = 0.5
    """Edges judged: present in at least this share of resamples (50 % [R])."""
    n_boot: int = 500
    """Bootstrap resamples (over the resampled groups)."""
    seed: int = 1000
    """Held-out rollout seed."""


SETUPS = {
    "smoke": Setup(n_layouts=1, resamples=40, n_boot=50),
    "quick": Setup(n_layouts=2, resamples=400, n_boot=300),
    "full": Setup(),
}

CLAIMS = (
    Claim("G-2", "On ≥ 90 % of recurring edges, successive node values are positively correlated and the TD error "
          "has less variance than the two node values' variances summed.",
          "[P] abstract (lower-variance values); [D] README P4; threshold [R]", "qualitative",
          "share_edges_pass", ">=", 0.9),
)


def _edge_matrices(s: Setup, layout: Any, seed: int) -> tuple[list[tuple], np.ndarray, np.ndarray, np.ndarray]:
    """Per edge (columns) and resample (rows): V̂(u), V̂(v), δ, NaN where the resample lacks the edge."""
    table, _, _ = collect_groups(KeyDoorFactory(OBSERVABLE), EpsilonOraclePolicy(s.epsilon),
                                 [layout] * s.resamples, s.group_size, seed=seed)
    graph = build_state_graph(table, KEY, gamma=s.gamma)
    group_codes = {g: k for k, g in enumerate(dict.fromkeys(table.group_id.tolist()))}
    names: dict[tuple, int] = {}
    col = np.empty(len(graph.edge_src), dtype=np.int64)
    for e, (u, v) in enumerate(zip(graph.edge_src.tolist(), graph.edge_dst.tolist())):
        ku, kv = graph.node_keys[u][1], graph.node_keys[v][1]
        col[e] = names.setdefault((layout.task_id, ku, kv), len(names))
    row = np.array([group_codes[graph.node_keys[u][0]] for u in graph.edge_src.tolist()])
    shape = (s.resamples, len(names))
    vu, vv, td = (np.full(shape, np.nan) for _ in range(3))
    vu[row, col] = graph.node_value[graph.edge_src]
    vv[row, col] = graph.node_value[graph.edge_dst]
    td[row, col] = graph.edge_td
    return list(names), vu, vv, td


def _verdicts(vu: np.ndarray, vv: np.ndarray, td: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    """(cov, var_u, var_v, var_td, present share) per edge on the resample rows ``idx``."""
    u, v, d = vu[idx], vv[idx], td[idx]
    present = np.isfinite(u)
    n = present.sum(0).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an edge absent from a whole bootstrap resample
        mu, mv, md = np.nanmean(u, 0), np.nanmean(v, 0), np.nanmean(d, 0)
        den = np.maximum(n - 1, 1)
        cov = np.nansum((u - mu) * (v - mv), 0) / den
        var_u = np.nansum((u - mu) ** 2, 0) / den
        var_v = np.nansum((v - mv) ** 2, 0) / den
        var_d = np.nansum((d - md) ** 2, 0) / den
    return cov, var_u, var_v, var_d, n / len(idx)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    tasks = layouts(s.n_layouts, seed=s.layout_seed, calibrate=None, config=OBSERVABLE)
    names: list[tuple] = []
    mats: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for k, lay in enumerate(tasks):
        ctx.progress("G-2 resampled groups", k, len(tasks))
        n, vu, vv, td = _edge_matrices(s, lay, s.seed + k)
        names += n
        mats.append((vu, vv, td))
    vu, vv, td = (np.concatenate([m[i] for m in mats], axis=1) for i in range(3))
    terminal = np.array([isinstance(kv, Terminal) for _, _, kv in names])
    loop = np.array([ku == kv for _, ku, kv in names])
    ordinary = ~terminal & ~loop

    def share(idx: np.ndarray, which: np.ndarray) -> tuple[float, int]:
        cov, var_u, var_v, var_d, pres = _verdicts(vu, vv, td, idx)
        judged = which & (pres >= s.min_presence)
        ok = (cov > 0) & (var_d < var_u + var_v)
        m = int(judged.sum())
        return (float(ok[judged].mean()) if m else float("nan")), m

    all_rows = np.arange(s.resamples)
    point, n_judged = share(all_rows, ordinary)
    rng = np.random.default_rng(s.seed)
    boots = np.array([share(rng.integers(0, s.resamples, s.resamples), ordinary)[0] for _ in range(s.n_boot)])
    cov, var_u, var_v, var_d, pres = _verdicts(vu, vv, td, all_rows)
    judged = ordinary & (pres >= s.min_presence)
    ratio = var_d[judged] / (var_u[judged] + var_v[judged])
    corr = cov[judged] / np.sqrt(var_u[judged] * var_v[judged])
    loops_judged = loop & (pres >= s.min_presence)
    term_judged = terminal & (pres >= s.min_presence)
    ctx.data["g2"] = {"var_ratio": ratio.tolist(), "corr": corr.tolist(),
                      "edges": [[str(t), str(u)[:60], str(v)[:60]] for (t, u, v), j in zip(names, judged) if j][:300]}
    return {
        # the units resampled are the groups (a resample judging no edge is undefined: dropped and counted)
        "share_edges_pass": percentile_estimate(point, boots, n=s.resamples, method="bootstrap over resampled groups"),
        "edges_judged": Estimate.exact(n_judged),
        "share_cov_positive": Estimate.exact(float((cov[judged] > 0).mean()) if n_judged else float("nan")),
        "share_var_reduced": Estimate.exact(float((var_d[judged] < var_u[judged] + var_v[judged]).mean())
                                            if n_judged else float("nan")),
        "median_var_ratio": Estimate.exact(float(np.median(ratio)) if n_judged else float("nan")),
        "median_corr_uv": Estimate.exact(float(np.median(corr)) if n_judged else float("nan")),
        "self_loops_judged": Estimate.exact(float(loops_judged.sum())),
        "terminal_edges_judged": Estimate.exact(float(term_judged.sum())),
        "terminal_share_var_reduced": Estimate.exact(
            float((var_d[term_judged] <= var_u[term_judged] + var_v[term_judged] + 1e-15).mean())
            if term_judged.any() else float("nan")),
    }


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    g = data["g2"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(g["corr"], g["var_ratio"], s=10, alpha=0.6)
    ax.axhline(1, color="gray", lw=0.8, ls="--")
    ax.axvline(0, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("corr(V̂u, V̂v) across resampled groups")
    ax.set_ylabel("Var δ / (Var V̂u + Var V̂v)")
    ax.set_title("G-2: recurring edges (pass = right of 0 and below 1)")
    fig.tight_layout()
    path = out / "g2_td_covariance.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e165.g2po_td_covariance",
    quick_budget_s=15,
    parallel_safe=True,
    title="E165 G-2: correlated node values make TD errors less noisy (P4)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="G2PO-style (reconstructed) [R]. The G-1 world (fully observable KeyDoor, ε-oracle ε = 0.5, N = 8, "
               "γ = 0.95); 400 independent groups per task. Edges into absorbing nodes and self-loops are excluded "
               "from the judged set by pre-registration and reported apart. No LM.",
)
