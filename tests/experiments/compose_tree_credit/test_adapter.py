"""The composition's adapter on a hand-checkable toy world: tree → step table → G2PO-style/GRPO/progress credit.

Toy world: s0 --go--> s1; at s1 "win" ends won (reward 1) and "lose" ends lost (reward 0). A tree whose second leaf
branches from the first at depth 1 gives two trajectories sharing the row (s0, go); s1 is the shared branch node.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.envs.policies import SoftmaxTablePolicy
from agentmill.envs.wrappers import UniqueObsWrapper
from agentmill.experiments.compose_tree_credit.adapter import (
    CreditConfig,
    EnvForker,
    RolloutSpec,
    grow_group,
    merge_mask,
    progress_terms,
    sample_groups,
    step_advantages,
    tree_to_table,
)
from agentmill.lm.fork import BranchRequest
from agentmill.methods.tree_rollouts.tree import RolloutTree

S = 0.5 / math.sqrt(0.5)  # episode term of R = (1, 0): (1 - 0.5)/std, unbiased std 0.7071


class Toy:
    """Deterministic three-state world with an oracle distance (s0: 2, s1: 1, won: 0, lost: none)."""

    def __init__(self, task: str = "toy") -> None:
        self.task, self.s = task, "s0"

    def _obs(self):
        desc = {"s0": "start room", "s1": "fork room", "won": "you won", "lost": "you lost"}[self.s]
        adm = {"s0": ["go"], "s1": ["lose", "win"]}.get(self.s, [])
        dist = {"s0": 2, "s1": 1, "won": 0}.get(self.s)
        info = {"admissible_commands": adm, "description": desc, "inventory": "nothing", "task_id": self.task,
                "won": self.s == "won", "oracle": {"distance_to_goal": dist, "plan_commands": []}}
        return desc, info

    def reset(self, *, seed=None, options=None):
        self.s = "s0"
        return self._obs()

    def step(self, action):
        self.s = {("s0", "go"): "s1", ("s1", "win"): "won", ("s1", "lose"): "lost"}[(self.s, action)]
        done = self.s in ("won", "lost")
        return (*self._obs()[:1], float(self.s == "won"), done, False, self._obs()[1])

    def close(self):
        pass


class Scripted:
    """A policy whose next choice is forced (probability 1) from a queue; uniform once the queue is empty."""

    def __init__(self, choices):
        self.choices = list(choices)

    def probs(self, info):
        cmds = info["admissible_commands"]
        if len(cmds) > 1 and self.choices:
            pick = self.choices.pop(0)
            return {c: float(c == pick) for c in cmds}
        return {c: 1.0 / len(cmds) for c in cmds}


def _two_branch_tree(env_factory=Toy):
    """Leaf 0 = [go, win] from the root; leaf 1 = [go, lose] branching from leaf 0 at depth 1 (the tree sampler's
    bookkeeping done by hand, as ``TreeGrower._run_wave`` does it)."""
    forker = EnvForker(lambda task: env_factory(), Scripted(["win", "lose"]))
    handle = forker.start_tree("toy", (7, 0))
    tree = RolloutTree("toy")
    c0 = forker.expand(handle, [BranchRequest(None, 0, np.zeros(0, np.int32), 0, 5)])[0]
    tree.add_leaf(c0.token_ids, new_from=0, parent_leaf=None, logprobs=c0.logprobs, entropies=c0.entropies,
                  branch_entropy=c0.branch_entropy, reward=forker.verify(c0.token_ids), finish=c0.finish)
    prefix = c0.token_ids[:1]
    c1 = forker.expand(handle, [BranchRequest(0, 1, prefix, 1, 5)])[0]
    full = np.concatenate([prefix, c1.token_ids])
    tree.add_leaf(full, new_from=1, parent_leaf=0, logprobs=c1.logprobs, entropies=c1.entropies,
                  branch_entropy=c1.branch_entropy, reward=forker.verify(full), finish=c1.finish)
    tree.counters = forker.end_tree(handle).to_dict()
    return forker, handle, tree


def test_two_branch_tree_table_shares_the_prefix_row() -> None:
    forker, handle, tree = _two_branch_tree()
    assert [forker.decode(lf.tokens) for lf in tree.leaves] == ["go ; win", "go ; lose"]
    assert [lf.success for lf in tree.leaves] == [True, False]
    g = tree_to_table(tree, handle.rows, "g")
    t = g.table
    assert list(t.action) == ["go", "win", "go", "lose"]
    assert list(t.obs) == ["start room", "fork room", "start room", "fork room"]
    assert list(g.generated) == [True, True, False, True]  # the second leaf's first row is the shared prefix
    assert g.gen_tokens == 3 and tree.counters["recompute_tokens"] == 1  # the replayed step is not generated
    assert list(g.labels.progress) == [1, 1, 1, -1]  # lost: distance unknown
    assert merge_mask(t).tolist() == [True, True, True, True]  # s0 and s1 each have 2 visits


def test_shared_branch_state_gets_the_graph_credit_by_hand() -> None:
    _, handle, tree = _two_branch_tree()
    t = tree_to_table(tree, handle.rows, "g").table
    g2 = step_advantages(t, CreditConfig("g2po"))
    gr = step_advantages(t, CreditConfig("grpo"))
    # episode term: R = (1, 0) -> ±0.5/0.7071 on every row of each leaf
    np.testing.assert_allclose(gr["advantages"], [S, S, -S, -S], rtol=1e-5)
    # graph: V(s0) = (0.95 + 0)/2, V(s1) = (1 + 0)/2; delta(s0->s1) = 0.95*0.5 - 0.475 = 0,
    # delta(s1->won) = 1 - 0.5 = 0.5, delta(s1->lost) = -0.5; standardised over the 4 rows: std = sqrt(0.5/3)
    z = 0.5 / math.sqrt(0.5 / 3)
    np.testing.assert_allclose(g2["graph"], [0.0, z, 0.0, -z], atol=1e-5)
    np.testing.assert_allclose(g2["advantages"], [S, S + z, -S, -S - z], rtol=1e-5)
    assert np.all(g2["progress"] == 0)


def test_unique_obs_leaves_graph_credit_only_at_branch_nodes_and_none_without_a_tree() -> None:
    def wrapped():
        return UniqueObsWrapper(Toy(), p=1.0, seed=3)

    _, handle, tree = _two_branch_tree(wrapped)
    t = tree_to_table(tree, handle.rows, "g").table
    assert t.obs[0] == t.obs[2] and t.obs[1] == t.obs[3]  # the shared prefix keeps the observation it showed
    d = np.abs(step_advantages(t, CreditConfig("g2po"))["advantages"]
               - step_advantages(t, CreditConfig("grpo"))["advantages"])
    assert d[0] == 0.0 and d[2] == 0.0 and d[1] > 1.0 and d[3] > 1.0  # only the branch node s1 carries a graph term
    # independent rollouts under UniqueObs: no node has two visits, the graph term is exactly 0
    forker = EnvForker(lambda task: UniqueObsWrapper(Toy(), p=1.0, seed=3), Scripted([]))
    ind = grow_group(forker, "toy", RolloutSpec(budget=12, max_steps=5, selector="independent"), (5, 0))
    ti = tree_to_table(ind, forker.current.rows, "i").table
    assert not merge_mask(ti).any()
    assert len(set(ti.success.tolist())) == 2  # a mixed group, so the episode term is non-zero
    np.testing.assert_array_equal(step_advantages(ti, CreditConfig("g2po"))["advantages"],
                                  step_advantages(ti, CreditConfig("grpo"))["advantages"])


def test_progress_term_is_beta_log_ratio_over_the_admissible_set() -> None:
    _, handle, tree = _two_branch_tree()
    t = tree_to_table(tree, handle.rows, "g").table
    ref = SoftmaxTablePolicy()
    pol = ref.clone()
    pol._add("fork room", {"task_id": "toy", "description": "fork room", "inventory": "nothing"}, ["lose", "win"],
             np.array([0.0, math.log(3.0)]))  # pi(win|s1) = 3/4, pi(lose|s1) = 1/4; reference uniform
    p = progress_terms(t, pol, ref, beta=2.0)
    np.testing.assert_allclose(p, [0.0, 2 * math.log(0.75 / 0.5), 0.0, 2 * math.log(0.25 / 0.5)], atol=1e-12)
    np.testing.assert_array_equal(progress_terms(t, ref, ref.clone(), beta=1.0), np.zeros(4))
    adv = step_advantages(t, CreditConfig("g2po", beta=2.0), policy=pol, reference=ref)
    np.testing.assert_allclose(adv["advantages"], adv["episode"] + adv["graph"] + p)
    with pytest.raises(ValueError, match="needs policy and reference"):
        step_advantages(t, CreditConfig("g2po", beta=1.0))


def test_tree_and_independent_spend_the_same_budget_and_share_seed_leaves() -> None:
    from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, generate_layout
    from agentmill.envs.rollout import EpsilonOraclePolicy

    cfg = KeyDoorConfig(n_rooms=4, n_locks=1, max_steps=12)
    lay = generate_layout(3, cfg)
    groups = {}
    for sel in ("uucb", "independent"):
        forker = EnvForker(lambda task: KeyDoorEnv(task, cfg), EpsilonOraclePolicy(0.85))
        tree = grow_group(forker, lay, RolloutSpec(budget=60, max_steps=12, selector=sel), (11, 0))
        groups[sel] = (tree, tree_to_table(tree, forker.current.rows, sel))
    for tree, g in groups.values():
        assert g.gen_tokens == int(g.generated.sum()) == 60  # both arms spend exactly the budget
    t_tree, t_ind = groups["uucb"][0], groups["independent"][0]
    # common random numbers: the tree's two seed rollouts are the independent arm's first two
    for a, b in zip(t_tree.leaves[:2], t_ind.leaves[:2]):
        np.testing.assert_array_equal(a.tokens, b.tokens)
    assert any(lf.new_from > 0 for lf in t_tree.leaves) and all(lf.new_from == 0 for lf in t_ind.leaves)
    # a branch replays its parent's prefix: every leaf's rows continue its parent's state
    g = groups["uucb"][1].table
    for r in range(len(g) - 1):
        if g.end[r] == 0:
            assert g.next_obs[r] == g.obs[r + 1]


def test_sample_groups_is_reproducible() -> None:
    from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, generate_layout
    from agentmill.envs.rollout import EpsilonOraclePolicy

    cfg = KeyDoorConfig(n_rooms=4, n_locks=1, max_steps=12)
    lays = [generate_layout(s, cfg) for s in (3, 4)]
    a, b = (sample_groups(lambda t: KeyDoorEnv(t, cfg), EpsilonOraclePolicy(0.85), lays, RolloutSpec(40, 12), 9)
            for _ in range(2))
    assert list(a.table.action) == list(b.table.action) and len(set(a.table.group_id.tolist())) == 2
