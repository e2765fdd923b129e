"""E167 M-2: the rule dimensions measure what they claim (KeyDoor).

On held-out KeyDoor transitions (layouts never used elsewhere): the ground truth scores 100 on every applicable
dimension; k ∈ {0..6} field corruptions lower factuality monotonically (Spearman of k against the mean factuality at
each k); a shuffled target (the next observation of a random transition of another layout) scores low; the
copy-previous baseline fails on changed transitions and passes on unchanged ones. Scores are normalised
(x − 1)/4·100. The same battery runs on office tool-call transitions (``domain_office.py``: held-out fixture seeds,
one behaviour episode each, clusters = fixture seeds) as separate claims with the same thresholds; KeyDoor's numbers
do not depend on it (its own generators). TextWorld and FactSearch are not in this battery.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, spearman
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.stages import mean_ci
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    n_items: int = 500
    """Held-out transitions scored (500 as pre-registered)."""
    n_layouts: int = 60
    """Layouts they are drawn from (clusters of the bootstrap)."""
    max_k: int = 6
    """Largest number of corrupted fields."""
    n_boot: int = 10_000
    """Bootstrap resamples (10,000 pre-registered for verdict runs)."""
    seed: int = 0
    office_tasks: int = 50
    """Office fixture seeds, one 10-call behaviour episode each (50 × 10 = the 500 pre-registered items; 0 = no
    office battery)."""


SETUPS = {"smoke": Setup(n_items=60, n_layouts=8, n_boot=500, office_tasks=6),
          "quick": Setup(n_boot=2000, office_tasks=20), "full": Setup()}
OFFICE_SEED0 = 5_000_000
"""First office fixture seed of the battery (no office world model is trained on any fixture seed)."""

CLAIMS = (
    Claim("E167-M2-gt", "The ground truth scores 100 on every applicable rule dimension (minimum over items and "
          "dimensions).", "[R] rule dimensions", "—", "m2_gt_min", ">=", 100.0 - 1e-9, judge_on="exact",
          exact_why="deterministic scores of fixed items; the minimum over the battery"),
    Claim("E167-M2-monotone", "Factuality falls with the number of corrupted fields (Spearman of k against mean "
          "factuality).", "[R]", "—", "m2_spearman_k_factuality", "<=", -0.95, judge_on="exact",
          exact_why="a rank correlation of 7 deterministic means over a fixed seeded battery"),
    Claim("E167-M2-shuffled", "A shuffled target scores low on factuality.", "[R]", "—",
          "m2_shuffled_factuality", "<=", 35.0),
    Claim("E167-M2-copy-changed", "Copy-previous fails on changed transitions (factuality).", "[R]; [C] GUI judges "
          "call a stale state an error", "—", "m2_copy_factuality_changed", "<=", 60.0),
    Claim("E167-M2-copy-unchanged", "Copy-previous passes on unchanged transitions (factuality).", "[R]", "—",
          "m2_copy_factuality_unchanged", ">=", 80.0),
    Claim("E167-M2-office-gt", "Office: the ground truth scores 100 on every applicable rule dimension (minimum over "
          "items and dimensions).", "[R] rule dimensions, per domain", "—", "m2_office_gt_min", ">=", 100.0 - 1e-9,
          judge_on="exact", exact_why="deterministic scores of fixed items; the minimum over the battery"),
    Claim("E167-M2-office-monotone", "Office: factuality falls with the number of corrupted lines (Spearman of k "
          "against mean factuality).", "[R]", "—", "m2_office_spearman_k_factuality", "<=", -0.95,
          judge_on="exact", exact_why="a rank correlation of 7 deterministic means over a fixed seeded battery"),
    Claim("E167-M2-office-shuffled", "Office: a shuffled target scores low on factuality.", "[R]", "—",
          "m2_office_shuffled_factuality", "<=", 35.0),
    Claim("E167-M2-office-copy-changed", "Office: copy-previous fails on changed transitions (factuality).", "[R]",
          "—", "m2_office_copy_factuality_changed", "<=", 60.0),
    Claim("E167-M2-office-copy-unchanged", "Office: copy-previous passes on unchanged transitions (factuality).",
          "[R]", "—", "m2_office_copy_factuality_unchanged", ">=", 80.0),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.world_model.data import assign_splits, collect_keydoor
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.judges import JudgeItem, RuleScorer

    d = KeyDoorDomain()
    scorer = RuleScorer(d)
    rows = collect_keydoor(assign_splits(0, 0, 0, s.n_layouts, s.seed + 2), 3, seed=s.seed).rows
    rng = np.random.default_rng(s.seed)
    pick = rng.permutation(len(rows))[:s.n_items]
    items = [rows[int(i)] for i in pick]
    norm = lambda v: (v - 1) / 4 * 100  # noqa: E731
    gt_scores, fact_k = [], np.zeros((len(items), s.max_k + 1))
    shuffled, copy_ch, copy_un, cl_ch, cl_un = [], [], [], [], []
    for n, x in enumerate(items):
        it = JudgeItem("", x.next_obs, (x.obs,), x.card)
        g = scorer.score_observation(x.next_obs, it).as_dict()
        gt_scores += [norm(v) for v in g.values() if v > 0]
        for k in range(s.max_k + 1):
            bad = d.corrupt(x.next_obs, k, np.random.default_rng([s.seed, n]))  # nested: k+1 adds one field
            fact_k[n, k] = norm(scorer.score_observation(bad, it).factuality)
        other = rows[int(rng.integers(len(rows)))]
        while other.task_id == x.task_id:
            other = rows[int(rng.integers(len(rows)))]
        shuffled.append(norm(scorer.score_observation(other.next_obs, it).factuality))
        c = norm(scorer.score_observation(x.obs, it).factuality)
        (copy_ch if x.changed else copy_un).append(c)
        (cl_ch if x.changed else cl_un).append(x.task_id)
    means = fact_k.mean(0)
    rho = spearman(np.arange(s.max_k + 1), means)
    rho_items = spearman(np.tile(np.arange(s.max_k + 1), len(items)), fact_k.reshape(-1))
    clusters = [x.task_id for x in items]
    ctx.data.update({"factuality_by_k": means.tolist(), "spearman_items": rho_items,
                     "n_changed": len(copy_ch), "n_unchanged": len(copy_un), "n_items": len(items),
                     "copy_changed_mean": float(np.mean(copy_ch)), "copy_unchanged_mean": float(np.mean(copy_un))})
    return {"m2_gt_min": Estimate.exact(min(gt_scores), n=len(items)),
            "m2_spearman_k_factuality": Estimate.exact(rho, n=s.max_k + 1),
            "m2_spearman_items_observed": Estimate.exact(rho_items, n=len(items)),
            "m2_shuffled_factuality": mean_ci(shuffled, clusters, seed=s.seed, n_boot=s.n_boot),
            "m2_copy_factuality_changed": mean_ci(copy_ch, cl_ch, seed=s.seed, n_boot=s.n_boot),
            "m2_copy_factuality_unchanged": mean_ci(copy_un, cl_un, seed=s.seed, n_boot=s.n_boot),
            **(office_battery(s, ctx) if s.office_tasks else {})}


def office_battery(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    """The same battery on office tool-call transitions: every transition of the held-out episodes is an item (the
    corruption replaces whole output lines; the shuffled target comes from another fixture seed)."""
    from agentmill.methods.world_model.domain_office import OfficeDomain, office_table
    from agentmill.methods.world_model.judges import JudgeItem, RuleScorer

    d = OfficeDomain()
    scorer = RuleScorer(d)
    items = office_table([(OFFICE_SEED0 + j, "test") for j in range(s.office_tasks)], 1, max_steps=10,
                         seed=s.seed).rows
    rng = np.random.default_rng([s.seed, 167])
    norm = lambda v: (v - 1) / 4 * 100  # noqa: E731
    gt_scores, fact_k = [], np.zeros((len(items), s.max_k + 1))
    shuffled, copy_ch, copy_un, cl_ch, cl_un = [], [], [], [], []
    for n, x in enumerate(items):
        it = JudgeItem("", x.next_obs, (x.obs,), x.card)
        gt_scores += [norm(v) for v in scorer.score_observation(x.next_obs, it).as_dict().values() if v > 0]
        for k in range(s.max_k + 1):
            bad = d.corrupt(x.next_obs, k, np.random.default_rng([s.seed, n]))
            fact_k[n, k] = norm(scorer.score_observation(bad, it).factuality)
        other = items[int(rng.integers(len(items)))]
        while other.task_id == x.task_id:
            other = items[int(rng.integers(len(items)))]
        shuffled.append(norm(scorer.score_observation(other.next_obs, it).factuality))
        c = norm(scorer.score_observation(x.obs, it).factuality)
        (copy_ch if x.changed else copy_un).append(c)
        (cl_ch if x.changed else cl_un).append(x.task_id)
    means = fact_k.mean(0)
    clusters = [x.task_id for x in items]
    ctx.data["office"] = {"factuality_by_k": means.tolist(), "n_items": len(items), "n_changed": len(copy_ch),
                          "n_unchanged": len(copy_un), "n_invalid": sum(x.invalid for x in items),
                          "spearman_items": spearman(np.tile(np.arange(s.max_k + 1), len(items)), fact_k.reshape(-1)),
                          "copy_unchanged_equal_obs": sum(x.obs.strip() == x.next_obs.strip() for x in items
                                                          if not x.changed)}
    return {"m2_office_gt_min": Estimate.exact(min(gt_scores), n=len(items)),
            "m2_office_spearman_k_factuality": Estimate.exact(spearman(np.arange(s.max_k + 1), means), n=s.max_k + 1),
            "m2_office_shuffled_factuality": mean_ci(shuffled, clusters, seed=s.seed, n_boot=s.n_boot),
            "m2_office_copy_factuality_changed": mean_ci(copy_ch, cl_ch, seed=s.seed, n_boot=s.n_boot),
            "m2_office_copy_factuality_unchanged": mean_ci(copy_un, cl_un, seed=s.seed, n_boot=s.n_boot)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    ys = data["factuality_by_k"]
    ax.plot(range(len(ys)), ys, "o-", label="KeyDoor (fields)")
    if data.get("office"):
        ys = data["office"]["factuality_by_k"]
        ax.plot(range(len(ys)), ys, "s--", label="office (output lines)")
        ax.legend(fontsize=8)
    ax.set_xlabel("corrupted fields k")
    ax.set_ylabel("factuality (0-100)")
    ax.set_title("M-2: rule factuality under corruption")
    fig.tight_layout()
    p = out / "m2_corruption.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_rule_dims_validity",
    quick_budget_s=8,
    parallel_safe=True,
    title="E167 M-2: the rule dimensions measure what they claim (ground truth, corruption, shuffled, copy-previous)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LLM-free; 500 held-out KeyDoor transitions (3 rooms, 1 lock) from 60 layouts, layout-cluster "
               "bootstrap; office: every call of 50 held-out fixture seeds × one 10-call behaviour episode (500), "
               "fixture-seed-cluster bootstrap. TextWorld and FactSearch are not in this battery.",
)
