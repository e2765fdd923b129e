"""Rollout tree: trie statistics, candidates, flags, segments, hand-checkable."""

import math

import numpy as np
import pytest

from agentmill.methods.tree_rollouts.tree import Reward, RolloutTree, every_k, step_boundary, top_entropy, union


def _add(tree, toks, reward, new_from=0, parent=None, ents=None):
    toks = np.asarray(toks, np.int32)
    n = len(toks) - new_from
    return tree.add_leaf(toks, new_from=new_from, parent_leaf=parent, logprobs=np.zeros(n),
                         entropies=np.full(n, 0.5) if ents is None else np.asarray(ents),
                         branch_entropy=0.5, reward=Reward(reward, ""), finish="length")


def test_counts_along_paths_and_candidates():
    t = RolloutTree("p", branch_policy=every_k(2))
    _add(t, [1, 2, 3, 4], 0.0)
    _add(t, [1, 2, 5, 6], 1.0, new_from=2, parent=0)
    assert t.root.n == 2 and t.root.k == 1 and t.is_mixed()
    depth2 = t.root.children[1].children[2]
    assert (depth2.n, depth2.k) == (2, 1)
    assert depth2.children[5].n == 1 and depth2.children[3].k == 0
    # every_k(2) gives t = 2 on both leaves: one shared candidate (same prefix), plus the root
    assert sorted(c.depth for c in t.candidates) == [0, 2]
    assert t.flags(t.root) == (0.0, 0.0)
    assert t.flags(depth2.children[3]) == (1.0, 0.0) and t.flags(depth2.children[5]) == (0.0, 1.0)
    assert [g.depth for g in t.group_nodes()] == [0, 2]
    assert np.array_equal(t.prefix(depth2), [1, 2])


def test_unscorable_leaves_are_not_counted():
    t = RolloutTree("p")
    _add(t, [1, 2], None)
    _add(t, [1, 3], 0.0)
    assert t.root.n == 1 and len(t.leaves) == 2 and len(t.scorable()) == 1


def test_reward_validation():
    t = RolloutTree("p")
    with pytest.raises(ValueError, match="non-binary"):
        _add(t, [1], 0.5)
    with pytest.raises(ValueError, match="NaN"):
        _add(t, [1], math.nan)
    t2 = RolloutTree("p", reward_threshold=0.5)
    assert _add(t2, [1], 0.7).success is True


def test_candidate_parents_are_nearest_candidate_ancestors():
    t = RolloutTree("p", branch_policy=every_k(2))
    _add(t, [1, 2, 3, 4, 5, 6], 0.0)
    by_depth = {c.depth: c for c in t.candidates}
    assert by_depth[4].cand_parent is by_depth[2] and by_depth[2].cand_parent is t.root
    assert max(by_depth) == 4    # never the final token (position 6 == len)


def test_branch_policies():
    toks = np.array([5, 6, 7, 8, 9, 10])
    ents = np.array([0.1, 2.0, 0.2, 1.5, 1.4, 0.0])
    assert every_k(2)(toks, ents, None) == [2, 4]
    assert top_entropy(n=2, min_gap=2)(toks, ents, None) == [1, 3]
    text = {5: "a", 6: "b.", 7: "c", 8: "\n", 9: "d", 10: "e"}
    sb = step_boundary()(toks, ents, lambda ids: "".join(text[i] for i in ids))
    assert sb == [2, 4]
    assert union(every_k(3), top_entropy(1))(toks, ents, None) == [1, 3]


def test_segments_are_single_child_chains():
    t = RolloutTree("p")
    _add(t, [1, 2, 3], 0.0)
    _add(t, [1, 2, 4], 1.0)
    segs = [(a.depth, b.depth) for a, b in t.segments()]
    assert sorted(segs) == [(0, 2), (2, 3), (2, 3)]
