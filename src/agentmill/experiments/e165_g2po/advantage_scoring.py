"""Scoring the three advantage estimators against progress labels: AUROC with a cluster bootstrap over groups.

Shared by G-3 (advantage quality on KeyDoor and TextWorld), its LLM arm and the no-repeat control, so all three
score advantages the same way."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, auroc, percentile_estimate
from agentmill.core.types import LabelTable, StepTable
from agentmill.experiments.protocol import RunContext
from agentmill.methods.g2po import g2po_advantages, gigpo_advantages, grpo_advantages
from agentmill.methods.g2po.keys import ExactKey, StateKeyFn

ESTIMATORS = ("grpo", "gigpo", "g2po")


def estimator_advantages(table: StepTable, key_fn: StateKeyFn) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Advantages of GRPO, GiGPO and G2PO-style (each with its spec defaults) on one table, plus G2PO's graph term
    (``"g2po_graph"``) and its graph diagnostics."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the low-merge-rate warning is expected in the no-repeat arms (G-4)
        g2 = g2po_advantages(table, key_fn)
        out = {"grpo": grpo_advantages(table).advantages, "gigpo": gigpo_advantages(table, key_fn).advantages,
               "g2po": g2.advantages, "g2po_graph": g2.step}
    return out, dict(g2.diagnostics)


def shuffled_key_table(table: StepTable, key_fn: StateKeyFn, rng: np.random.Generator) -> StepTable:
    """The shuffled-keys control: each row's observation becomes the key of a random other row of its group
    (a permutation within the group, so every node keeps its visit count); final observations keep their own
    key. Score it with ``ExactKey(normalize_ws=False)``."""
    keys = np.array([repr(key_fn(o, i)) for o, i in zip(table.obs, table.info)], dtype=object)
    order = np.argsort(table.group_index, kind="stable")  # rows of each group together, in row order
    bounds = np.flatnonzero(np.diff(table.group_index[order])) + 1
    new = keys.copy()
    for rows in np.split(order, bounds):
        new[rows] = keys[rows[rng.permutation(rows.size)]]
    last = table.is_last
    nxt = np.empty(len(table), dtype=object)
    nxt[:-1] = new[1:]
    for r in np.flatnonzero(last):
        nxt[r] = repr(key_fn(table.next_obs[r], table.next_info[r]))
    n = len(table)
    return StepTable(group_id=table.group_id, traj_id=table.traj_id, t=table.t, obs=list(new), next_obs=list(nxt),
                     action=table.action, reward=table.reward, end=table.end, success=table.success,
                     info=[{} for _ in range(n)], next_info=[{} for _ in range(n)], candidates=table.candidates)


def cluster_weights(clusters: np.ndarray, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap multiplicities: ``(codes (S,), W (n_boot, n_clusters))``; resample b gives row r the weight
    ``W[b, codes[r]]`` (how often its cluster was drawn)."""
    _, codes = np.unique(clusters, return_inverse=True)
    codes = codes.reshape(-1)
    k = int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    W = np.stack([np.bincount(rng.integers(0, k, size=k), minlength=k) for _ in range(n_boot)]).astype(np.float64)
    return codes, W


def weighted_auroc(score: np.ndarray, pos: np.ndarray, w: np.ndarray, inv: np.ndarray | None = None) -> float:
    """AUROC (ties 1/2) with row weights: the Mann-Whitney statistic of the weighted sample. Equals ``auroc`` when
    all weights are 1; a resample of whole clusters is the weight vector of cluster multiplicities. ``inv`` (the
    rank of each score among the distinct scores, ``np.unique(score, return_inverse=True)[1]``) may be passed to
    skip the sort when the same scores are reweighted many times."""
    if inv is None:
        inv = np.unique(score, return_inverse=True)[1]
    inv = inv.reshape(-1)
    w1 = np.bincount(inv, weights=w * pos)
    w0 = np.bincount(inv, weights=w * (~pos))
    below = np.cumsum(w0) - w0
    n1, n0 = w1.sum(), w0.sum()
    if n1 == 0 or n0 == 0:
        return math.nan
    return float((w1 * (below + 0.5 * w0)).sum() / (n1 * n0))


def _pct(boots: np.ndarray, value: float, n_groups: int) -> Estimate:
    """The percentile interval of the group-bootstrap replicates (``core.stats.percentile_estimate``: undefined
    replicates dropped and counted); ``n`` is the number of groups resampled, the independent units."""
    return percentile_estimate(value, boots, n=n_groups, method="cluster_bootstrap(groups)")


def auroc_table(scores: dict[str, np.ndarray], pos: np.ndarray, codes: np.ndarray, W: np.ndarray
                ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Point AUROC and bootstrap AUROCs (n_boot,) of each score, all on the same resamples (paired)."""
    point = {k: auroc(v, pos) for k, v in scores.items()}
    boots = {}
    for k, v in scores.items():
        inv = np.unique(v, return_inverse=True)[1]
        boots[k] = np.array([weighted_auroc(v, pos, Wb[codes], inv) for Wb in W])
    return point, boots


def summarise(prefix: str, point: dict[str, float], boots: dict[str, np.ndarray], out: dict[str, Estimate],
              n_groups: int) -> None:
    """``<prefix>_auroc_<est>`` and the paired gains ``<prefix>_gain_g2po_<base>`` into ``out``."""
    for k in point:
        out[f"{prefix}_auroc_{k}"] = _pct(boots[k], point[k], n_groups)
    for base in ("grpo", "gigpo"):
        if "g2po" in point and base in point:
            out[f"{prefix}_gain_g2po_{base}"] = _pct(boots["g2po"] - boots[base], point["g2po"] - point[base],
                                                     n_groups)


def score_arm(table: StepTable, labels: LabelTable, key_fn: StateKeyFn, n_boot: int, seed: int, prefix: str,
         out: dict[str, Estimate], ctx: RunContext, *, controls: bool = False) -> None:
    known = labels.progress >= 0
    adv, diag = estimator_advantages(table, key_fn)
    rows = np.flatnonzero(known)
    pos = labels.progress[rows] == 1
    codes, W = cluster_weights(table.group_id[rows], n_boot, seed)
    scores = {k: adv[k][rows] for k in ESTIMATORS}
    point, boots = auroc_table(scores, pos, codes, W)
    summarise(prefix, point, boots, out, W.shape[1])
    # P5: share of progress steps inside failed runs whose advantage is > 0 (total A, and the graph term alone)
    infail = (~table.success[rows]) & pos
    for name, col in (("g2po", adv["g2po"]), ("g2po_graph", adv["g2po_graph"]), ("grpo", adv["grpo"]),
                      ("gigpo", adv["gigpo"])):
        hit = (col[rows] > 0) & infail
        if infail.sum():
            b = np.array([(Wb[codes] * hit).sum() / max((Wb[codes] * infail).sum(), 1e-300) for Wb in W])
            out[f"{prefix}_infail_share_{name}"] = _pct(b, float(hit.sum() / infail.sum()), W.shape[1])
    out[f"{prefix}_n_rows"] = Estimate.exact(rows.size)
    out[f"{prefix}_progress_rate"] = Estimate.exact(float(pos.mean()))
    out[f"{prefix}_infail_progress_steps"] = Estimate.exact(float(infail.sum()))
    out[f"{prefix}_success_rate"] = Estimate.exact(float(table.success[table.traj_starts].mean()))
    for d in ("merge_rate", "shared_visit_fraction"):
        out[f"{prefix}_{d}"] = Estimate.exact(diag[d])
    ctx.data[prefix] = {"auroc": point, "ci": {k: [out[f"{prefix}_auroc_{k}"].lo, out[f"{prefix}_auroc_{k}"].hi]
                                               for k in point}, "diagnostics": diag}
    if not controls:
        return
    # shuffled keys: G2PO and GiGPO on the permuted-key table, GRPO unchanged (it never reads keys)
    sh = shuffled_key_table(table, key_fn, rng_for(seed, "shuffle-keys"))
    sh_adv, sh_diag = estimator_advantages(sh, ExactKey(normalize_ws=False))
    sp, sb = auroc_table({k: sh_adv[k][rows] for k in ESTIMATORS}, pos, codes, W)
    summarise(f"{prefix}_shuffled", sp, sb, out, W.shape[1])
    out[f"{prefix}_shuffled_merge_rate"] = Estimate.exact(sh_diag["merge_rate"])
    # permuted labels: the progress labels of the known rows in random order
    perm = rng_for(seed, "perm-labels").permutation(pos)
    pp, pb = auroc_table(scores, perm, codes, W)
    for k in ESTIMATORS:
        out[f"{prefix}_perm_auroc_{k}"] = _pct(pb[k], pp[k], W.shape[1])
    ctx.data[f"{prefix}_controls"] = {"shuffled": sp, "permuted": pp}
