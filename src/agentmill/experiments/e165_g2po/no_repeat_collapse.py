"""E165 G-4: without repeated states G2PO collapses to GRPO; the gain tracks the repeat rate ([D] P1, g2po README; [S]).

Setup and thresholds are the project's [R] (docs/methods/g2po.md, Claims and verdicts).

The issue's negative control, "no repeated states ⇒ G2PO equals GRPO exactly", measured on real rollouts:

- **unique start** (``UniqueObsWrapper(p=1)``: every observation, o_0 included, carries a fresh request id and
  timestamp): every node has one visit, every TD error telescopes to 0, and G2PO-style advantages equal GRPO's
  (max |diff| < 1e-12) [D];
- **shared start** (``keep_initial=True``: the task prompt is shared): rows t ≥ 1 still equal GRPO to 1e-12; only
  the first action carries a graph term (P1);
- **repeat rate sweep**: the G3 KeyDoor setup under ``UniqueObsWrapper(p)`` for p ∈ {0, .25, .5, .75, 1}; the
  G2PO-style − GRPO AUROC gain must fall as p rises (Spearman(gain, 1 − p) ≥ 0.8) [S: AppWorld < 3 points];
- **scrubber** (positive control): ``ScrubbedKey(UNIQUE_OBS_PATTERN, FieldsKey)`` at p = 1 restores the p = 0 gain
  to within 0.02.

The wrapper changes only what is observed, and the ε-oracle behaviour policy reads the oracle, so every arm replays
the same trajectories (checked): the comparisons across p are paired by construction, and one cluster bootstrap
over groups serves all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, auroc, percentile_estimate, spearman
from agentmill.envs.keydoor import KeyDoorConfig
from agentmill.experiments.e165_g2po import PAPER
from agentmill.experiments.e165_g2po.advantage_scoring import cluster_weights, estimator_advantages, weighted_auroc
from agentmill.experiments.e165_g2po.keydoor_groups import KEY, KeyDoorFactory, keydoor_rollouts, keydoor_tasks
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.g2po.keys import UNIQUE_OBS_PATTERN, ScrubbedKey


@dataclass(frozen=True)
class Setup:
    n_layouts: int = 16
    """Calibrated KeyDoor layouts (the G-3 setup)."""
    layout_seed: int = 0
    """First layout generation seed."""
    groups: int = 500
    """Groups per arm (the same trajectories replayed under each observation wrapper)."""
    group_size: int = 8
    """Rollouts per group, N."""
    epsilon: float = 0.85
    """ε-oracle behaviour policy, as in G-3."""
    ps: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    """UniqueObs probabilities of the sweep [R]."""
    n_boot: int = 1000
    """Cluster-bootstrap resamples (clusters = groups)."""
    seed: int = 1000
    """Held-out rollout seed."""


SETUPS = {
    "smoke": Setup(n_layouts=4, groups=16, n_boot=50),
    "quick": Setup(groups=200, n_boot=500),
    "full": Setup(),
}

CLAIMS = (
    Claim("G-4a", "No repeated states, unique start: G2PO-style advantages equal GRPO's exactly (max |diff| "
          "< 1e-12) — the issue's negative control.", "[D] g2po README P1", "AppWorld: G2PO ≈ GRPO (< 3 points) [S]",
          "unique_start_max_diff", "<=", 1e-12, judge_on="exact",
          exact_why="an algebraic identity checked on constructed tables, a floating-point difference against 1e-12: "
                    "no sampling"),
    Claim("G-4b", "No repeated states, shared start: rows t ≥ 1 equal GRPO to 1e-12 (only the first action gets a "
          "graph term).", "[D] g2po README P1", "—", "shared_start_max_diff_t_ge_1", "<=", 1e-12, judge_on="exact",
          exact_why="an algebraic identity checked on constructed tables, a floating-point difference against 1e-12: "
                    "no sampling"),
    Claim("G-4c", "The G2PO-style − GRPO AUROC gain tracks the repeat rate: Spearman(gain, 1 − p) ≥ 0.8 over "
          "p ∈ {0, .25, .5, .75, 1} (whole 95 % CI).", "[S] AppWorld < 3 points; threshold [R]", "—",
          "spearman_gain_vs_repeat", ">=", 0.8),
    Claim("G-4d", "Positive control: ScrubbedKey(UNIQUE_OBS_PATTERN) at p = 1 restores the p = 0 gain to within 0.02 "
          "(|difference|, whole 95 % CI).", "threshold [R]", "—", "scrubbed_gain_abs_diff", "<=", 0.02),
)


def _est(boots: np.ndarray, value: float, n_groups: int) -> Estimate:
    """Percentile interval of the group-bootstrap replicates (undefined ones dropped and counted); ``n`` is the number
    of groups resampled, the independent units."""
    return percentile_estimate(value, boots, n=n_groups, method="cluster_bootstrap(groups)")


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    out: dict[str, Estimate] = {}
    cfg = KeyDoorConfig()
    tasks = keydoor_tasks(s, cfg)
    ctx.progress("G-4 unique / shared start", 0, len(s.ps) + 2)

    # (a) unique start and (b) shared start: G2PO vs GRPO row by row
    ut, _ = keydoor_rollouts(tasks, s.groups, s.group_size, s.epsilon, s.seed, KeyDoorFactory(cfg, 1.0, False))
    ua, udiag = estimator_advantages(ut, KEY)
    out["unique_start_max_diff"] = Estimate.exact(float(np.max(np.abs(ua["g2po"] - ua["grpo"]))), n=len(ut))
    out["unique_start_merge_rate"] = Estimate.exact(udiag["merge_rate"])
    st, _ = keydoor_rollouts(tasks, s.groups, s.group_size, s.epsilon, s.seed, KeyDoorFactory(cfg, 1.0, True))
    sa, sdiag = estimator_advantages(st, KEY)
    later = st.t >= 1
    first = ~later
    out["shared_start_max_diff_t_ge_1"] = Estimate.exact(float(np.max(np.abs(sa["g2po"] - sa["grpo"])[later])))
    out["shared_start_max_diff_t0"] = Estimate.exact(float(np.max(np.abs(sa["g2po"] - sa["grpo"])[first])))
    out["shared_start_merge_rate"] = Estimate.exact(sdiag["merge_rate"])
    # P1's documented inflation: the first-step graph term standardised over all steps vs over first steps only
    g0 = sa["g2po_graph"][first]
    out["shared_start_first_step_graph_sd"] = Estimate.exact(float(np.std(g0, ddof=1)))
    ctx.data["collapse"] = {"unique_start_max_diff": out["unique_start_max_diff"].value,
                            "shared_start_max_diff_t_ge_1": out["shared_start_max_diff_t_ge_1"].value,
                            "shared_start_max_diff_t0": out["shared_start_max_diff_t0"].value}

    # (c) the repeat-rate sweep and (d) the scrubber, all on the same trajectories
    ref_actions = None
    advs: dict[str, dict[str, np.ndarray]] = {}
    merge: dict[str, float] = {}
    for k, p in enumerate(s.ps):
        ctx.progress(f"G-4 sweep p={p:g}", k + 2, len(s.ps) + 2)
        tb, lab = keydoor_rollouts(tasks, s.groups, s.group_size, s.epsilon, s.seed, KeyDoorFactory(cfg, p, False))
        if ref_actions is None:
            ref_actions, labels = tb.action, lab
        elif not np.array_equal(tb.action, ref_actions):
            raise AssertionError("UniqueObsWrapper changed the trajectories; the sweep would not be paired")
        advs[f"p={p:g}"], d = estimator_advantages(tb, KEY)
        merge[f"p={p:g}"] = d["merge_rate"]
        if p == 1.0:
            advs["scrubbed"], d = estimator_advantages(tb, ScrubbedKey((UNIQUE_OBS_PATTERN,), KEY))
            merge["scrubbed"] = d["merge_rate"]
    rows = np.flatnonzero(labels.progress >= 0)
    pos = labels.progress[rows] == 1
    codes, W = cluster_weights(tb.group_id[rows], s.n_boot, s.seed)
    grpo = advs[f"p={s.ps[0]:g}"]["grpo"][rows]
    g_point = auroc(grpo, pos)
    g_inv = np.unique(grpo, return_inverse=True)[1]
    g_boot = np.array([weighted_auroc(grpo, pos, Wb[codes], g_inv) for Wb in W])
    gains, gain_boot = {}, {}
    for name, a in advs.items():
        x = a["g2po"][rows]
        gains[name] = auroc(x, pos) - g_point
        inv = np.unique(x, return_inverse=True)[1]
        gain_boot[name] = np.array([weighted_auroc(x, pos, Wb[codes], inv) for Wb in W]) - g_boot
        out[f"gain_{name}"] = _est(gain_boot[name], gains[name], W.shape[1])
        out[f"merge_rate_{name}"] = Estimate.exact(merge[name])
    sweep = [f"p={p:g}" for p in s.ps]
    one_minus_p = 1.0 - np.array(s.ps)
    rho = spearman(one_minus_p, np.array([gains[n] for n in sweep]))
    rho_boot = np.array([spearman(one_minus_p, np.array([gain_boot[n][b] for n in sweep]))
                         for b in range(W.shape[0])])
    out["spearman_gain_vs_repeat"] = _est(rho_boot, rho, W.shape[1])
    p0, p1 = f"p={s.ps[0]:g}", "scrubbed"
    if p1 in gains:
        out["scrubbed_gain_abs_diff"] = _est(np.abs(gain_boot[p1] - gain_boot[p0]), abs(gains[p1] - gains[p0]),
                                             W.shape[1])
    ctx.data["sweep"] = {"p": list(s.ps), "gain": [gains[n] for n in sweep],
                         "lo": [out[f"gain_{n}"].lo for n in sweep], "hi": [out[f"gain_{n}"].hi for n in sweep],
                         "merge_rate": [merge[n] for n in sweep], "scrubbed_gain": gains.get("scrubbed")}
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    sw = data["sweep"]
    p = np.array(sw["p"])
    g = np.array(sw["gain"])
    lo, hi = np.array(sw["lo"], dtype=float), np.array(sw["hi"], dtype=float)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(p, g, yerr=[np.nan_to_num(g - lo), np.nan_to_num(hi - g)], fmt="o-", capsize=3,
                label="G2PO-style − GRPO AUROC gain (95 % CI)")
    if sw.get("scrubbed_gain") is not None:
        ax.plot([1.0], [sw["scrubbed_gain"]], "s", color="tab:green", ms=8, label="p = 1 with ScrubbedKey")
    ax.axhline(0, color="gray", lw=0.8)
    ax2 = ax.twinx()
    ax2.plot(p, sw["merge_rate"], "x:", color="tab:red", label="merge rate")
    ax2.set_ylabel("graph merge rate", color="tab:red")
    ax.set_xlabel("UniqueObs probability p (share of observations made unique)")
    ax.set_ylabel("AUROC gain over GRPO")
    ax.set_title("G-4: the no-repeat collapse")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7)
    fig.tight_layout()
    path = out / "g4_no_repeat_collapse.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e165.g2po_no_repeat_collapse",
    quick_budget_s=45,
    parallel_safe=True,
    title="E165 G-4: no repeated states ⇒ G2PO-style equals GRPO; the gain tracks the repeat rate",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="G2PO-style (reconstructed) [R]. The G-3 KeyDoor setup (16 calibrated layouts, ε-oracle ε = 0.85, "
               "N = 8, γ = 0.95, key (description, inventory)) under UniqueObsWrapper, which appends a request id "
               "and timestamp like API outputs do; the paper's AppWorld comparison [S] is with a 1.5B LM.",
)
