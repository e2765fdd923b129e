"""The rollout tree: a token trie of verified completions with incremental per-prefix statistics.

Every leaf is a complete, verified completion. A *candidate* is a trie node at depth t (the completion prefix
y[0:t]) from which a fresh continuation may be sampled; the root (t = 0) is always a candidate, other candidates
come from a branch-point policy on each leaf ([R], tree_rollouts README). Two candidates with the same prefix are the
same node. Per node the tree keeps n (scorable leaves through it) and k (their successes), updated when a leaf is
added, so scoring never rescans leaves. A token trie is equivalent to a radix tree of segments (README deviation 7);
segments are the maximal single-child chains (:meth:`RolloutTree.segments`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np


class Reward(NamedTuple):
    """A verifier's verdict. ``value=None`` means unscorable (verifier error): excluded from n and k."""

    value: float | None
    reason: str = ""


@dataclass
class Leaf:
    id: int
    tokens: np.ndarray            # int32 [len] full completion (shared prefix + new tokens)
    new_from: int                 # branch position: tokens[new_from:] were sampled by this expansion
    parent_leaf: int | None
    logprobs: np.ndarray          # float32 [len - new_from] of the new tokens
    entropies: np.ndarray         # float32 [len - new_from]
    reward: Reward
    success: bool | None          # None when unscorable
    finish: str
    text: str = ""
    gen_tokens: int = 0
    uucb_terms: dict[str, float] = field(default_factory=dict)
    eos_logprob: float | None = None   # the sampled EOS's logprob when finish == "eos" (EOS is not in tokens)


class Node:
    """Trie node at ``depth`` (prefix length). ``next_entropy``: entropy of the sampling distribution of the
    token at position ``depth`` (the branch token of this candidate), NaN until some leaf sampled there."""

    __slots__ = ("depth", "parent", "children", "n", "k", "next_entropy", "candidate", "fork_leaf", "cand_parent",
                 "leaves", "id")

    def __init__(self, depth: int, parent: "Node | None", node_id: int) -> None:
        self.depth, self.parent, self.id = depth, parent, node_id
        self.children: dict[int, Node] = {}
        self.n = 0
        self.k = 0
        self.next_entropy = math.nan
        self.candidate = False
        self.fork_leaf: int | None = None
        self.cand_parent: Node | None = None
        self.leaves: list[int] = []   # ids of leaves passing through (scorable or not)


# ------------------------------------------------------------------------------------------ branch points
BranchPolicy = Callable[[np.ndarray, np.ndarray, Callable[[Sequence[int]], str] | None], list[int]]


def step_boundary(pattern: str = r"[.\n]\s*$") -> BranchPolicy:
    """Positions right after a token whose decoded text ends in "." or a newline (default for math)."""
    rx = re.compile(pattern)

    def policy(tokens: np.ndarray, entropies: np.ndarray, decode) -> list[int]:
        if decode is None:
            return []
        return [t + 1 for t in range(len(tokens) - 1) if rx.search(decode([int(tokens[t])]))]

    return policy


def top_entropy(n: int = 3, min_gap: int = 2) -> BranchPolicy:
    """The n positions of highest sampling entropy, at least ``min_gap`` apart (TreeRL-style entropy forks)."""

    def policy(tokens: np.ndarray, entropies: np.ndarray, decode) -> list[int]:
        order = np.argsort(-np.nan_to_num(entropies, nan=-1.0), kind="stable")
        chosen: list[int] = []
        for t in order:
            t = int(t)
            if 0 < t < len(tokens) and all(abs(t - c) >= min_gap for c in chosen):
                chosen.append(t)
            if len(chosen) == n:
                break
        return sorted(chosen)

    return policy


def every_k(k: int = 4) -> BranchPolicy:
    def policy(tokens: np.ndarray, entropies: np.ndarray, decode) -> list[int]:
        return list(range(k, len(tokens), k))

    return policy


def union(*policies: BranchPolicy) -> BranchPolicy:
    def policy(tokens: np.ndarray, entropies: np.ndarray, decode) -> list[int]:
        return sorted({t for p in policies for t in p(tokens, entropies, decode)})

    return policy


# ------------------------------------------------------------------------------------------------ the tree
class RolloutTree:
    """Leaves of one prompt in a token trie. ``add_leaf`` is the only mutator."""

    def __init__(self, prompt_key: str, *, branch_policy: BranchPolicy | None = None,
                 max_branch_points_per_leaf: int = 8, decode: Callable[[Sequence[int]], str] | None = None,
                 reward_threshold: float | None = None) -> None:
        self.prompt_key = prompt_key
        self.branch_policy = branch_policy
        self.max_branch_points = max_branch_points_per_leaf
        self.decode = decode
        self.reward_threshold = reward_threshold
        self.leaves: list[Leaf] = []
        self._nodes: list[Node] = []
        self.root = self._new_node(0, None)
        self.root.candidate = True
        self.candidates: list[Node] = [self.root]
        self.n_nodes = 1
        self.counters: dict[str, float] = {}
        # running total of leaf lengths: the sampler asks for the mean once per candidate per pick
        self._len_sum = 0
        self._len_n = 0
        self._branching: set[int] = set()  # ids of nodes with >= 2 children (group_nodes without a scan)

    def _new_node(self, depth: int, parent: Node | None) -> Node:
        node = Node(depth, parent, len(self._nodes))
        self._nodes.append(node)
        return node

    # --------------------------------------------------------------------------------------------- mutation
    def success_of(self, reward: Reward) -> bool | None:
        if reward.value is None:
            return None
        v = float(reward.value)
        if math.isnan(v):
            raise ValueError(f"reward is NaN for a scored leaf ({reward.reason!r}); return Reward(None, ...)")
        if self.reward_threshold is not None:
            return v >= self.reward_threshold
        if v not in (0.0, 1.0):
            raise ValueError(f"non-binary reward {v} needs TreeConfig.reward_threshold for the Beta posterior")
        return v == 1.0

    def add_leaf(self, tokens: np.ndarray, *, new_from: int, parent_leaf: int | None, logprobs: np.ndarray,
                 entropies: np.ndarray, branch_entropy: float, reward: Reward, finish: str, text: str = "",
                 gen_tokens: int | None = None, uucb_terms: dict[str, float] | None = None,
                 eos_logprob: float | None = None) -> Leaf:
        tokens = np.asarray(tokens, dtype=np.int32)
        success = self.success_of(reward)
        leaf = Leaf(len(self.leaves), tokens, new_from, parent_leaf, np.asarray(logprobs, np.float32),
                    np.asarray(entropies, np.float32), reward, success, finish, text,
                    int(len(tokens) - new_from if gen_tokens is None else gen_tokens), dict(uucb_terms or {}),
                    eos_logprob)
        self.leaves.append(leaf)
        if self._len_n == len(self.leaves) - 1:
            self._len_sum += len(tokens)
            self._len_n += 1
        # Walk/insert the path; count the leaf on every node of its path (root included). Plain ints from
        # ``tolist`` are the keys ``int(tok)`` gave, without a numpy scalar per token.
        path = [self.root]
        node = self.root
        nodes = self._nodes
        created = 0
        for tok in tokens.tolist():
            child = node.children.get(tok)
            if child is None:  # _new_node, inlined: a fresh suffix creates one node per token
                child = Node(node.depth + 1, node, len(nodes))
                nodes.append(child)
                node.children[tok] = child
                created += 1
                if len(node.children) == 2:
                    self._branching.add(node.id)
            node = child
            path.append(node)
        self.n_nodes += created
        lid = leaf.id
        if success is None:
            for nd in path:
                nd.leaves.append(lid)
        else:
            hit = int(success)
            for nd in path:
                nd.leaves.append(lid)
                nd.n += 1
                nd.k += hit
        # Entropies of the sampling distributions along the new part (node at depth t: entropy of token t);
        # ``tolist`` turns float32 into the same Python floats ``float(h)`` did.
        if len(entropies):
            for j, h in enumerate(leaf.entropies.tolist()):
                nd = path[new_from + j]
                if math.isnan(nd.next_entropy):
                    nd.next_entropy = h
        elif math.isnan(path[new_from].next_entropy):
            path[new_from].next_entropy = float(branch_entropy)
        # New candidates: branch points of this leaf (never the final token, capped per leaf).
        if self.branch_policy is not None and len(tokens) > 1:
            full_ent = np.full(len(tokens), np.nan, np.float32)
            full_ent[new_from: new_from + len(leaf.entropies)] = leaf.entropies
            points = [t for t in self.branch_policy(tokens, full_ent, self.decode) if 0 < t < len(tokens)]
            for t in points[: self.max_branch_points]:
                nd = path[t]
                if not nd.candidate:
                    nd.candidate = True
                    nd.fork_leaf = leaf.id
                    self.candidates.append(nd)
                    self._link_candidate(nd)
        return leaf

    def _link_candidate(self, nd: Node) -> None:
        """Nearest candidate ancestor (the hierarchical prior's parent); re-link candidates below it."""
        up = nd.parent
        while up is not None and not up.candidate:
            up = up.parent
        nd.cand_parent = up
        if len(nd.leaves) == 1:
            return  # a node only this new leaf passes has no candidates below it yet (points come in order)
        for c in self.candidates:
            if c is not nd and c.cand_parent is up and c.depth > nd.depth and self._is_ancestor(nd, c):
                c.cand_parent = nd

    @staticmethod
    def _is_ancestor(a: Node, b: Node) -> bool:
        while b is not None and b.depth > a.depth:
            b = b.parent
        return b is a

    # ---------------------------------------------------------------------------------------------- queries
    def prefix(self, node: Node) -> np.ndarray:
        """Completion tokens y[0:depth] of a node (from any leaf through it)."""
        if node.depth == 0:
            return np.zeros(0, np.int32)
        return self.leaves[node.leaves[0]].tokens[: node.depth]

    def scorable(self) -> list[Leaf]:
        return [lf for lf in self.leaves if lf.success is not None]

    def group_nodes(self) -> list[Node]:
        """The root plus every branching node (>= 2 children): the groups of the objective [R]."""
        return [self.root] + [self._nodes[i] for i in sorted(self._branching) if i != self.root.id]

    def flags(self, node: Node) -> tuple[float, float]:
        """(F, S): 1 if every scorable leaf under ``node`` failed (succeeded), else 0; empty -> (0, 0)."""
        if node.n == 0:
            return 0.0, 0.0
        return float(node.k == 0), float(node.k == node.n)

    def is_mixed(self) -> bool:
        return 0 < self.root.k < self.root.n

    def segments(self) -> list[tuple[Node, Node]]:
        """Maximal single-child chains (start node exclusive, end node inclusive) — the radix-tree view."""
        out = []

        def walk(start: Node) -> None:
            for child in start.children.values():
                end = child
                while len(end.children) == 1 and not self._leaf_ends_at(end):
                    end = next(iter(end.children.values()))
                out.append((start, end))
                walk(end)

        walk(self.root)
        return out

    def _leaf_ends_at(self, node: Node) -> bool:
        return any(len(self.leaves[i].tokens) == node.depth for i in node.leaves)

    def nodes(self) -> list[Node]:
        return self._nodes

    def mean_leaf_length(self) -> float:
        """Mean completion length of the leaves, from a running integer total: the sampler asks once per candidate
        per pick, and re-averaging every leaf each time was a third of a synthetic run. Integer sums are exact in
        float64, so ``total / count`` is the value ``np.mean`` of the lengths gives, bit for bit."""
        if not self.leaves:
            return 0.0
        if self._len_n != len(self.leaves):  # leaves appended behind add_leaf's back: recount
            self._len_sum, self._len_n = sum(len(lf.tokens) for lf in self.leaves), len(self.leaves)
        return self._len_sum / self._len_n
