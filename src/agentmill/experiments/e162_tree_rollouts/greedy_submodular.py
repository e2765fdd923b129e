"""E162-R4a/b + NC2: the expansion objective is monotone submodular, so greedy gets >= 1 - 1/e of optimal.

Instances [R]: a random group tree, observed leaves (all failed in 70% of instances), 8–12 candidates with
p ~ Beta(0.5, 2). The objective F(S) = sum_a w_a P(group a mixed | S) (beta ∈ {0, 0.25}) is checked exhaustively
over every subset of a multiset ground set (each candidate once plus two repeated copies, 10–14 elements), which is
stronger than sampling triples (docs/papers.md E162, deviation 6). Greedy is compared with the optimum over
multisets of k ∈ {2, 3, 4} expansions, on the gain over F(∅). NC2: the leaf-count objective n·P(mixed) must show
violations in >= 1% of 10 000 sampled triples per instance batch (the checker has power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, cluster_bootstrap
from agentmill.experiments.e162_tree_rollouts import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.tree_rollouts.objective import (brute_force_opt, check_submodular, greedy, objective,
                                                       objective_table, random_instance)

BOUND = 1 - 1 / math.e


@dataclass(frozen=True)
class Setup:
    instances: int = 500
    """Random instances (500 [R])."""
    ks: tuple[int, ...] = (2, 3, 4)
    """Expansion counts for greedy vs OPT [R]."""
    betas: tuple[float, ...] = (0.0, 0.25)
    """Internal-group weights checked [R]."""
    extra_copies: int = 2
    """Repeated candidates added to the ground set (expansions are a multiset)."""
    nc2_samples: int = 10_000
    """Sampled (S ⊂ T, x) triples for the leaf-count control, spread over the instances."""
    seed: int = 1000
    """Held-out seed."""
    chunk: int = 50
    """Instances per work unit."""


SETUPS = {"smoke": Setup(instances=6, ks=(2,), nc2_samples=600, chunk=3),
          "quick": Setup(instances=100, nc2_samples=10_000),
          "full": Setup()}

CLAIMS = (
    Claim("E162-R4a", "The expansion objective F(S) = Σ_a w_a·P(group a mixed) is monotone submodular: violations "
          "of monotonicity or diminishing returns (tol 1e-12) over all checked (T, x, y).",
          "[P] E162 abstract (submodular view)", "proved", "r4a_violations", "<=", 0, judge_on="exact",
          exact_why="an exhaustive check of every subset of a fixed seeded set of instances: a count of violations of "
                    "a theorem, no estimate"),
    Claim("E162-R4b", "Greedy expansion gets at least 1 − 1/e of the optimal gain: share of (instance, k) cases "
          "with greedy/OPT ≥ 0.632.", "[P] E162 (Nemhauser et al. 1978)", "≥ 1 − 1/e", "r4b_share_above_bound",
          ">=", 1.0, judge_on="exact",
          exact_why="a guarantee checked case by case, greedy against the brute-force optimum, on a fixed seeded "
                    "battery: any case below 1 - 1/e refutes it"),
    Claim("E162-NC2", "Negative control: the leaf-count objective n·P(mixed) is not submodular; the checker finds "
          "violations in ≥ 1% of sampled triples.", "[R] leaf counts are not submodular",
          "marginals 1, 1.25, 1.25 at p = .5", "nc2_violation_rate", ">=", 0.01),
)


def _unit(args: tuple[Setup, int]) -> dict[str, Any]:
    s, start = args
    viol = checked = 0
    worst = 0.0
    ratios: list[tuple[int, int, float, int, float]] = []   # (instance, k, greedy/OPT, depth, beta)
    nc2: list[tuple[int, int]] = []   # (violations, triples checked) per instance: the control's clusters
    per_instance_nc2 = max(1, s.nc2_samples // s.instances)
    for i in range(start, min(start + s.chunk, s.instances)):
        rng = rng_for(s.seed, "r4", i)
        inst = random_instance(rng)
        ground = list(range(inst.n_cands)) + [int(x) for x in rng.choice(inst.n_cands, s.extra_copies)]
        for beta in s.betas:
            v = check_submodular(None, ground, table=objective_table(inst, ground, beta))
            viol += v.monotone + v.submodular
            checked += v.checked
            worst = min(worst, v.worst)
        depth = max(inst.depth(a) for a in range(inst.n_groups))
        # With beta = 0 only the root group counts and greedy (take the largest p) is trivially optimal; the
        # internal-group weight beta > 0 is what makes the comparison informative.
        for beta in s.betas:
            f0 = objective([], inst, beta)
            for k in s.ks:
                g = objective(greedy(inst, k, beta), inst, beta) - f0
                opt = brute_force_opt(inst, k, beta)[1] - f0
                ratios.append((i, k, g / opt if opt > 1e-12 else 1.0, depth, beta))
        nc = check_submodular(lambda S, inst=inst: objective(S, inst, 0.0, leaf_count=True), ground,
                              exhaustive_max=0, samples=per_instance_nc2, rng=rng)
        nc2.append((nc.submodular + nc.monotone, nc.checked))
    return {"viol": viol, "checked": checked, "worst": worst, "ratios": ratios, "nc2": nc2}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    units = [(s, start) for start in range(0, s.instances, s.chunk)]
    done = [0]

    def tick(_i, _r) -> None:
        done[0] += 1
        ctx.progress("instances", done[0] * s.chunk, s.instances)

    res = ctx.executor.map(_unit, units, on_result=tick)
    ratios = np.array([r for u in res for r in u["ratios"]], dtype=float).reshape(-1, 5)
    viol = sum(u["viol"] for u in res)
    checked = sum(u["checked"] for u in res)
    # NC2 is a sampled rate: its interval resamples instances (the triples of one instance share its objective)
    nc2 = np.array([c for u in res for c in u["nc2"]], dtype=float).reshape(-1, 2)
    nc2_rate = cluster_bootstrap(lambda i: nc2[i, 0].sum() / nc2[i, 1].sum() if nc2[i, 1].sum() else np.nan,
                                 np.arange(len(nc2)), n_boot=2000, seed=s.seed)
    by_depth = {int(d): float(ratios[ratios[:, 3] == d, 2].mean()) for d in np.unique(ratios[:, 3])}
    by_k = {int(k): {"mean": float(ratios[ratios[:, 1] == k, 2].mean()),
                     "min": float(ratios[ratios[:, 1] == k, 2].min())} for k in s.ks}
    inner = ratios[ratios[:, 4] > 0]
    by_beta = {str(b): {"mean": float(ratios[ratios[:, 4] == b, 2].mean()),
                        "min": float(ratios[ratios[:, 4] == b, 2].min()),
                        "share_below_1": float((ratios[ratios[:, 4] == b, 2] < 1 - 1e-9).mean())} for b in s.betas}
    ctx.data.update({"ratios": ratios.tolist(), "by_depth": by_depth, "by_k": by_k, "by_beta": by_beta,
                     "checked": checked})
    return {
        "r4a_violations": Estimate.exact(viol, n=checked),
        "r4a_worst_gain_gap": Estimate.exact(min(u["worst"] for u in res)),
        "r4b_share_above_bound": Estimate.exact(float((ratios[:, 2] >= BOUND - 1e-12).mean()), n=len(ratios)),
        "r4b_min_ratio": Estimate.exact(float(ratios[:, 2].min()), n=len(ratios)),
        "r4b_mean_ratio": Estimate.exact(float(ratios[:, 2].mean()), n=len(ratios)),
        "r4b_min_ratio_beta_pos": Estimate.exact(float(inner[:, 2].min()) if len(inner) else float("nan"),
                                                 n=len(inner)),
        "nc2_violation_rate": nc2_rate,
        "nc2_triples_checked": Estimate.exact(float(nc2[:, 1].sum()), n=len(nc2)),
    }


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    r = np.array(data["ratios"])
    fig, ax = plt.subplots(figsize=(6, 4))
    for k in sorted(set(r[:, 1].astype(int))):
        ax.hist(r[r[:, 1] == k, 2], bins=np.linspace(0.6, 1.0, 41), alpha=0.6, label=f"k = {k}")
    ax.axvline(BOUND, color="red", ls="--", label="1 − 1/e")
    ax.set_xlabel("greedy gain / optimal gain")
    ax.set_ylabel("instances")
    ax.set_yscale("log")
    ax.set_title("Greedy expansion vs brute-force optimum")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "greedy_vs_opt.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e162.greedy_submodular",
    quick_budget_s=25,
    parallel_safe=True,
    title="E162 the expansion objective is submodular; greedy ≥ 1 − 1/e",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    version="3",  # v3: NC2 judged on a bootstrap over instances (was one number with no interval)
    scale_note="Random instances (numpy): group trees of 1–5 groups, 8–12 candidates, p ~ Beta(.5, 2); exhaustive "
               "check over all subsets of 10–14-element multiset ground sets. The objective's exact form is [R]; "
               "the review's 0.82 proxy correlation is the paper's proxy, not comparable.",
)
