"""The verl-style estimator: plain GRPO bit-for-bit, subtree spans, uid encoding and its guards."""

import json

import numpy as np
import pytest

from agentmill.methods.tree_rollouts.integrations.verl import (decode_tree_uid, encode_tree_uid, tree_grpo_advantage,
                                                               tree_paths)
from agentmill.methods.tree_rollouts.tree import Reward, RolloutTree


def _verl_grpo(scores, index, eps=1e-6, norm=True):
    """verl's compute_grpo_outcome_advantage, written out independently (torch.std is unbiased)."""
    out = np.zeros_like(scores)
    for g in set(index):
        rows = [i for i, u in enumerate(index) if u == g]
        x = scores[rows]
        mean, std = (0.0, 1.0) if len(rows) == 1 else (x.mean(), x.std(ddof=1))
        out[rows] = (x - mean) / (std + eps) if norm else x - mean
    return out


def test_plain_grpo_equals_verl_formula():
    rng = np.random.default_rng(0)
    rewards = np.zeros((6, 5))
    rewards[np.arange(6), 4] = rng.integers(0, 2, 6)
    mask = np.ones((6, 5))
    mask[0, 3:] = 0
    index = ["a", "a", "a", "b", "b", "c"]
    adv, ret = tree_grpo_advantage(rewards, mask, index)
    ref = _verl_grpo(rewards.sum(-1), index)
    assert np.array_equal(adv, ref[:, None] * mask) and adv is ret


def test_subtree_mode_averages_over_shared_nodes_and_accepts_torch():
    torch = pytest.importorskip("torch")
    rewards = torch.zeros(3, 4)
    rewards[0, 3] = 1.0
    mask = torch.ones(3, 4)
    # rows 0 and 1 share node 7 over tokens [0, 2); then diverge
    paths = [json.dumps([[7, 0, 2], [8, 2, 4]]), json.dumps([[7, 0, 2], [9, 2, 4]]), json.dumps([[10, 0, 4]])]
    adv, _ = tree_grpo_advantage(rewards, mask, np.array(["u"] * 3), non_tensor_batch={"tree_path": paths})
    flat = _verl_grpo(np.array([1.0, 0.0, 0.0]), ["u"] * 3)
    assert isinstance(adv, torch.Tensor)
    assert adv[0, 0].item() == pytest.approx((flat[0] + flat[1]) / 2) and adv[0, 3].item() == pytest.approx(flat[0])
    assert adv[2, 0].item() == pytest.approx(flat[2])
    flat_mode, _ = tree_grpo_advantage(rewards, mask, ["u"] * 3, non_tensor_batch={"tree_path": paths}, mode="flat")
    assert torch.allclose(flat_mode[:, 0], torch.tensor(flat, dtype=torch.float32))


def test_encoded_uids_group_by_prompt_and_guards():
    s = encode_tree_uid("p1", [(3, 0, 2), (4, 2, 5)])
    assert s.startswith("amtree1|") and decode_tree_uid(s) == ("p1", [(3, 0, 2), (4, 2, 5)])
    rewards = np.array([[0, 1.0], [0, 0.0]])
    idx = [encode_tree_uid("p", [(1, 0, 1), (2, 1, 2)]), encode_tree_uid("p", [(1, 0, 1), (3, 1, 2)])]
    adv, _ = tree_grpo_advantage(rewards, np.ones((2, 2)), idx)
    assert adv[0, 0] == pytest.approx(0.0) and adv[0, 1] > 0 > adv[1, 1]   # shared first token: mean of +a and -a
    with pytest.raises(ValueError, match="mix encoded and plain"):
        tree_grpo_advantage(rewards, np.ones((2, 2)), [idx[0], "p"])
    with pytest.raises(ValueError, match="exceed"):
        tree_grpo_advantage(rewards, np.ones((2, 2)), [encode_tree_uid("q", [(1, 0, 5)]), encode_tree_uid("q", [(1, 0, 2)])])
    with pytest.raises(ValueError):
        decode_tree_uid("plain-uid")


def test_tree_paths_cover_each_leaf():
    t = RolloutTree("p")
    for toks, r in (([1, 2, 3], 1.0), ([1, 2, 4, 5], 0.0)):
        t.add_leaf(np.array(toks), new_from=0, parent_leaf=None, logprobs=np.zeros(len(toks)),
                   entropies=np.zeros(len(toks)), branch_entropy=0.0, reward=Reward(r), finish="length")
    p = tree_paths(t)
    assert [(a, b) for _n, a, b in p[0]] == [(0, 2), (2, 3)] and [(a, b) for _n, a, b in p[1]] == [(0, 2), (2, 4)]
    assert p[0][0][0] == p[1][0][0]          # the shared segment is the same node
