"""A verl-style advantage estimator for tree rollouts (E162, [R]). No verl import happens here.

Register it yourself and select it in the config::

    from verl.trainer.ppo.core_algos import register_adv_est
    from agentmill.methods.tree_rollouts.integrations.verl import tree_grpo_advantage
    register_adv_est("agentmill_tree")(tree_grpo_advantage)
    # algorithm.adv_estimator=agentmill_tree

Tree structure comes, in order, from ``non_tensor_batch["tree_path"]`` (per row, a JSON list of
``[node_id, start, end]`` token spans covering the response), or from ``index`` entries made by
:func:`encode_tree_uid`. With neither, the result is plain GRPO, equal to verl's
``compute_grpo_outcome_advantage`` (unbiased std; a singleton group has mean 0 and std 1).

Recommended: keep ``uid`` = prompt uid and patch the trainer to pass ``non_tensor_batch`` (stock
``compute_advantage`` passes it only to the GDPO estimator); other components group by uid (DAPO filter,
metrics), so encoding paths into ``uid`` breaks them. Guard: encoded uids reaching the *stock* ``grpo`` estimator
make nearly every group a singleton, so advantages silently become raw rewards — encoded uids carry the fixed
prefix ``amtree1|`` so they are recognisable.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

PREFIX = "amtree1|"


def encode_tree_uid(uid: str, path: Sequence[tuple[int, int, int]]) -> str:
    """``uid`` plus the row's (node_id, start, end) spans, as one string verl can carry in ``index``."""
    if "|" in uid:
        raise ValueError(f"uid must not contain '|': {uid!r}")
    return PREFIX + uid + "|" + json.dumps([[int(a), int(b), int(c)] for a, b, c in path], separators=(",", ":"))


def decode_tree_uid(s: str) -> tuple[str, list[tuple[int, int, int]]]:
    if not s.startswith(PREFIX):
        raise ValueError(f"not an encoded tree uid (missing {PREFIX!r}): {s[:40]!r}")
    uid, spans = s[len(PREFIX):].split("|", 1)
    return uid, [tuple(x) for x in json.loads(spans)]


def _to_numpy(x: Any) -> tuple[np.ndarray, Any]:
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy(), x
    return np.asarray(x), None


def _like(arr: np.ndarray, ref: Any) -> Any:
    if ref is None:
        return arr
    import torch

    return torch.as_tensor(arr, dtype=ref.dtype if ref.is_floating_point() else torch.float32, device=ref.device)


def _check_spans(spans: list[tuple[int, int, int]], length: int, row: int) -> None:
    end = 0
    for _node, a, b in sorted(spans, key=lambda s: s[1]):
        if a < end or b < a or b > length:
            raise ValueError(f"row {row}: tree spans overlap or exceed the response length {length}: {spans}")
        end = b


def tree_grpo_advantage(token_level_rewards: Any, response_mask: Any, index: Any, epsilon: float = 1e-6,
                        norm_adv_by_std_in_grpo: bool = True, config: Any = None,
                        non_tensor_batch: dict | None = None, mode: str = "subtree", **kwargs: Any) -> tuple[Any, Any]:
    """Token advantages [bs, T] (and returns, equal to them, as verl's GRPO does).

    Flat: A_i = (s_i - mean_g) / (std_g + eps) per prompt group g (s = summed token rewards). Subtree: a token in
    span (node v) gets the mean flat advantage of the rows of its group whose path contains v (TreeAdv style).
    """
    if mode not in ("subtree", "flat"):
        raise ValueError(f"mode must be 'subtree' or 'flat', got {mode!r}")
    rewards, ref = _to_numpy(token_level_rewards)
    mask, _ = _to_numpy(response_mask)
    mask = mask.astype(np.float64)
    bs = rewards.shape[0]
    scores = rewards.astype(np.float64).sum(-1)
    idx = [str(x) for x in (index.tolist() if hasattr(index, "tolist") else list(index))]
    paths: list[list[tuple[int, int, int]] | None] = [None] * bs
    groups = list(idx)
    if non_tensor_batch is not None and "tree_path" in non_tensor_batch:
        paths = [[tuple(s) for s in (json.loads(p) if isinstance(p, str) else p)] for p in non_tensor_batch["tree_path"]]
    elif any(u.startswith(PREFIX) for u in idx):
        for i, u in enumerate(idx):
            if u.startswith(PREFIX):
                groups[i], paths[i] = decode_tree_uid(u)
        plain = {g for g, u in zip(groups, idx) if not u.startswith(PREFIX)}
        enc = {g for g, u in zip(groups, idx) if u.startswith(PREFIX)}
        if plain & enc:
            raise ValueError(f"prompt groups mix encoded and plain uids: {sorted(plain & enc)[:3]}")
    # Flat GRPO per group (verl: unbiased std; singleton mean 0, std 1).
    flat = np.zeros(bs)
    for g in dict.fromkeys(groups):
        rows = [i for i in range(bs) if groups[i] == g]
        x = scores[rows]
        mean, std = (0.0, 1.0) if len(rows) == 1 else (x.mean(), x.std(ddof=1))
        flat[rows] = (x - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else x - mean
    adv = flat[:, None] * mask
    if mode == "subtree" and any(p is not None for p in paths):
        for g in dict.fromkeys(groups):
            rows = [i for i in range(bs) if groups[i] == g]
            node_vals: dict[int, list[float]] = {}
            for i in rows:
                if paths[i] is None:
                    continue
                _check_spans(paths[i], int(mask[i].sum()), i)
                for node, _a, _b in paths[i]:
                    node_vals.setdefault(int(node), []).append(flat[i])
            for i in rows:
                if paths[i] is None:
                    continue
                for node, a, b in paths[i]:
                    adv[i, a:b] = np.mean(node_vals[int(node)])
                adv[i] *= mask[i]
    out = _like(adv, ref)
    return out, out


def tree_paths(tree: Any) -> list[list[tuple[int, int, int]]]:
    """The (node_id, start, end) spans of every leaf of a :class:`RolloutTree`, one per radix segment on its
    path — what ``tree_path`` / :func:`encode_tree_uid` carry."""
    segs = tree.segments()
    out = []
    for lf in tree.leaves:
        spans = []
        node = tree.root
        path_nodes = [node]
        for tok in lf.tokens:
            node = node.children[int(tok)]
            path_nodes.append(node)
        on_path = {id(n) for n in path_nodes}
        for start, end in segs:
            if id(end) in on_path and id(start) in on_path:
                spans.append((end.id, start.depth, end.depth))
        out.append(sorted(spans, key=lambda s: s[1]))
    return out
