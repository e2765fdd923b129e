"""Group advantages, tree-aware token advantages, and group admission (E162, [R]).

``grpo_advantages`` is verl's outcome GRPO (``compute_grpo_outcome_advantage``): (r - mean) / (std + eps) per
group with the unbiased std (ddof = 1); a singleton group gets mean 0 and std 1. TRL uses eps = 1e-4 with a
Bessel-corrected std; pass ``eps=1e-4`` to match it.

Caveat [R]: under a loss that *sums* token terms over sequences, the total gradient on a shared
prefix token is the sum of the flat advantages of the leaves below it in both modes; "subtree" redistribution only
changes the update through per-sequence length normalisation, ratio clipping, or deduplicated shared tokens.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from agentmill.methods.tree_rollouts.collapse import ZERO_STD_TOL
from agentmill.methods.tree_rollouts.tree import RolloutTree


def grpo_advantages(rewards, group_ids, *, scale: Literal["std", "none"] = "std", eps: float = 1e-6,
                    ddof: int = 1) -> np.ndarray:
    """Per-sample advantages; ``rewards`` [n] float, ``group_ids`` [n] any hashable labels."""
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(group_ids)
    if r.shape != g.shape or r.ndim != 1:
        raise ValueError(f"rewards and group_ids must be 1-D of equal length, got {r.shape} and {g.shape}")
    if np.isnan(r).any():
        raise ValueError("rewards contain NaN; drop unscorable samples before computing advantages")
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    out = np.zeros_like(r)
    for label in np.unique(g):
        idx = np.flatnonzero(g == label)
        x = r[idx]
        if len(x) == 1:
            mean, std = 0.0, 1.0   # verl: a singleton group keeps its raw reward
        else:
            mean, std = x.mean(), x.std(ddof=ddof)
        out[idx] = (x - mean) / (std + eps) if scale == "std" else x - mean
    return out


def _flat(tree: RolloutTree, scale: str, eps: float) -> dict[int, float]:
    leaves = tree.scorable()
    if not leaves:
        return {}
    adv = grpo_advantages([float(lf.reward.value) for lf in leaves], np.zeros(len(leaves)), scale=scale, eps=eps)
    return {lf.id: float(a) for lf, a in zip(leaves, adv)}


def node_advantages(tree: RolloutTree, *, scale: str = "std", eps: float = 1e-6) -> dict[int, float]:
    """A(v) = mean flat advantage of the scorable leaves under trie node v (TreeAdv/TreePO style), by node id."""
    flat = _flat(tree, scale, eps)
    out = {}
    # every node of a single-leaf chain has the same leaves: average each distinct leaf list once
    seen: dict[tuple[int, ...], float] = {}
    for nd in tree.nodes():
        key = tuple(nd.leaves)
        a = seen.get(key)
        if a is None:
            vals = [flat[i] for i in key if i in flat]
            a = seen[key] = float(np.mean(vals)) if vals else 0.0
        out[nd.id] = a
    return out


def tree_token_advantages(tree: RolloutTree, *, mode: Literal["flat", "subtree"] = "flat", scale: str = "std",
                          eps: float = 1e-6) -> list[np.ndarray]:
    """One float32 array per leaf (length = its completion). "flat": every token gets the leaf's GRPO advantage
    over the tree's leaves; "subtree": token t of a leaf gets A(node at depth t + 1). Unscorable leaves get 0."""
    if mode not in ("flat", "subtree"):
        raise ValueError(f"mode must be 'flat' or 'subtree', got {mode!r}")
    flat = _flat(tree, scale, eps)
    if mode == "flat":
        return [np.full(len(lf.tokens), flat.get(lf.id, 0.0), np.float32) for lf in tree.leaves]
    node_adv = node_advantages(tree, scale=scale, eps=eps)
    out = []
    for lf in tree.leaves:
        if lf.id not in flat:
            out.append(np.zeros(len(lf.tokens), np.float32))
            continue
        vals, node = [], tree.root
        for tok in lf.tokens:
            node = node.children[int(tok)]
            vals.append(node_adv[node.id])
        out.append(np.asarray(vals, np.float32))
    return out


@dataclass
class AdmissionReport:
    mask: np.ndarray                        # bool [n]: sample belongs to an admitted group
    reasons: dict[object, str] = field(default_factory=dict)   # group id -> "ok" | all_success | all_fail | ...

    @property
    def admitted_groups(self) -> int:
        return sum(1 for v in self.reasons.values() if v == "ok")


def group_admission(rewards, group_ids, *, min_std: float = ZERO_STD_TOL, min_range: float = 0.0,
                    min_nonzero: int = 1) -> AdmissionReport:
    """Which groups carry signal. Tolerance-based (never ``std == 0``: fp32 noise, NeMo-RL PR #4158); never
    raises or loops on an all-rejected batch — it warns and returns an empty mask."""
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(group_ids)
    if r.shape != g.shape:
        raise ValueError(f"rewards and group_ids must have equal shape, got {r.shape} and {g.shape}")
    mask = np.zeros(len(r), dtype=bool)
    reasons: dict[object, str] = {}
    for label in np.unique(g):
        idx = np.flatnonzero(g == label)
        x = r[idx]
        if len(x) < 2:
            reason = "too_few"
        elif x.std() <= min_std or np.ptp(x) <= min_range:
            hi, lo = x.max(), x.min()
            reason = "all_success" if lo >= 1.0 - 1e-9 else "all_fail" if hi <= 1e-9 else "zero_std"
        elif int((np.abs(x - x.mean()) > min_std).sum()) < min_nonzero:
            reason = "zero_std"
        else:
            reason = "ok"
        reasons[label.item() if hasattr(label, "item") else label] = reason
        if reason == "ok":
            mask[idx] = True
    if len(r) and not mask.any():
        warnings.warn("group_admission: every group in the batch carries no signal (all uniform); "
                      "returning an empty mask", stacklevel=2)
    return AdmissionReport(mask, reasons)
