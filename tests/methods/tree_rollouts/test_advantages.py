"""GRPO advantages (verl's formula), tree token advantages and their invariants, group admission."""

import numpy as np
import pytest

from agentmill.methods.tree_rollouts.advantages import group_admission, grpo_advantages, tree_token_advantages
from agentmill.methods.tree_rollouts.tree import Reward, RolloutTree


def test_grpo_matches_hand_computation():
    r = np.array([1.0, 0.0, 0.0, 1.0, 5.0])
    g = np.array([0, 0, 0, 0, 1])
    a = grpo_advantages(r, g)
    std = np.std([1, 0, 0, 1], ddof=1)
    assert a[:4] == pytest.approx((np.array([1, 0, 0, 1]) - 0.5) / (std + 1e-6))
    assert a[4] == pytest.approx(5.0 / (1 + 1e-6))          # singleton: mean 0, std 1 (verl)
    assert grpo_advantages(r, g, scale="none")[:4] == pytest.approx([0.5, -0.5, -0.5, 0.5])
    with pytest.raises(ValueError, match="NaN"):
        grpo_advantages([np.nan, 1.0], [0, 0])


def _tree(leaves):
    t = RolloutTree("p")
    for toks, r in leaves:
        toks = np.asarray(toks)
        t.add_leaf(toks, new_from=0, parent_leaf=None, logprobs=np.zeros(len(toks)), entropies=np.zeros(len(toks)),
                   branch_entropy=0.0, reward=Reward(r), finish="length")
    return t


def test_star_tree_subtree_equals_flat():
    t = _tree([([1, 2], 1.0), ([3, 4], 0.0), ([5, 6], 0.0)])
    flat, sub = tree_token_advantages(t, mode="flat"), tree_token_advantages(t, mode="subtree")
    assert all(np.allclose(a, b) for a, b in zip(flat, sub))


def test_subtree_conserves_the_token_sum_and_shares_prefix_credit():
    t = _tree([([1, 2, 3], 1.0), ([1, 2, 4], 0.0), ([5, 6], 0.0)])
    flat, sub = tree_token_advantages(t, mode="flat"), tree_token_advantages(t, mode="subtree")
    assert sum(a.sum() for a in sub) == pytest.approx(sum(a.sum() for a in flat))
    # the shared prefix [1, 2] gets the mean of its two leaves' flat advantages
    assert sub[0][0] == pytest.approx((flat[0][0] + flat[1][0]) / 2) and sub[0][2] == pytest.approx(flat[0][2])


def test_uniform_tree_has_zero_advantages():
    t = _tree([([1, 2], 0.0), ([1, 3], 0.0)])
    assert all((a == 0).all() for m in ("flat", "subtree") for a in tree_token_advantages(t, mode=m))


def test_group_admission_reasons_and_no_crash_on_all_rejected():
    r = np.array([1, 1, 0, 0, 0.5, 0.5 + 1e-9, 1, 0, 1])
    g = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4])
    rep = group_admission(r, g)
    assert rep.reasons == {0: "all_success", 1: "all_fail", 2: "zero_std", 3: "ok", 4: "too_few"}
    assert rep.mask.tolist() == [False] * 6 + [True, True, False] and rep.admitted_groups == 1
    with pytest.warns(UserWarning, match="no signal"):
        rep = group_admission([0.0, 0.0], [7, 7])
    assert not rep.mask.any()
