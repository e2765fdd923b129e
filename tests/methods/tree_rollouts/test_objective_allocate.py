"""Submodular objective (closed-form gains, checker power), greedy vs brute force, ABA-lite, empty-lake detector."""

import numpy as np
import pytest

from agentmill.methods.tree_rollouts.allocate import EmptyLakeDetector, build_forest
from agentmill.methods.tree_rollouts.config import AllocatorConfig, TreeConfig
from agentmill.methods.tree_rollouts.objective import (Instance, brute_force_opt, check_submodular, greedy,
                                                       marginal_gain, objective, objective_table, random_instance)
from agentmill.methods.tree_rollouts.selectors import make_selector
from agentmill.methods.tree_rollouts.synthetic import SyntheticChainLM, make_pool

# root group with one failed leaf; candidate 0 (p = .5) and 1 (p = .2) under the root, 2 (p = .9) under group 1
INST = Instance(parent=(-1, 0), observed=((0,), (0,)), cand_group=(0, 0, 1), p=(0.5, 0.2, 0.9))


def test_objective_and_marginal_gain_by_hand():
    assert objective([], INST) == 0.0
    # one leaf p = .5 in the root group with observed failures: P(mixed) = 1 - .5 - 0 = .5
    assert objective([0], INST) == pytest.approx(0.5)
    assert marginal_gain(0, [], INST) == pytest.approx(0.5)
    assert marginal_gain(2, [0], INST) == pytest.approx(objective([0, 2], INST) - objective([0], INST))
    assert objective([2], INST, beta=0.25) == pytest.approx(0.9 + 0.25 * 0.9)


def test_table_equals_direct_evaluation():
    rng = np.random.default_rng(3)
    inst = random_instance(rng)
    ground = list(range(inst.n_cands)) + [0]
    tab = objective_table(inst, ground, 0.25)
    for m in rng.integers(0, 1 << len(ground), 30):
        S = [ground[i] for i in range(len(ground)) if m >> i & 1]
        assert tab[m] == pytest.approx(objective(S, inst, 0.25), abs=1e-12)


def test_checker_finds_no_violation_on_f_and_many_on_leaf_count():
    rng = np.random.default_rng(0)
    for _ in range(5):
        inst = random_instance(rng)
        ground = list(range(inst.n_cands))
        assert check_submodular(None, ground, table=objective_table(inst, ground)).rate == 0
    inst = Instance(parent=(-1,), observed=((0,),), cand_group=(0,) * 6, p=(0.5,) * 6)
    v = check_submodular(lambda S: objective(S, inst, leaf_count=True), list(range(6)), exhaustive_max=0,
                         samples=2000, rng=rng)
    assert v.rate > 0.01


def test_greedy_reaches_the_bound_and_brute_force_is_optimal():
    _, opt = brute_force_opt(INST, 2)
    assert objective(greedy(INST, 2), INST) >= (1 - 1 / np.e) * opt
    assert opt >= max(objective([a, b], INST) for a in range(3) for b in range(3)) - 1e-12


def test_aba_lite_spends_the_same_total_and_more_on_uniform_prompts():
    lm = SyntheticChainLM()
    pool = make_pool("mix", 40, 1000)
    cfg = TreeConfig(budget_tokens=800, max_new_tokens=lm.length)
    args = dict(branch_policy=lm.branch_points, run_seed=1)
    uni = build_forest(pool, lm, lm.verify, make_selector("uucb"), AllocatorConfig("uniform"), cfg, **args)
    aba = build_forest(pool, lm, lm.verify, make_selector("uucb"), AllocatorConfig("aba_lite"), cfg, **args)
    total = 800 * len(pool)
    for trees in (uni, aba):
        assert sum(t.counters["gen_tokens"] for t in trees) <= total
    assert sum(t.counters["gen_tokens"] for t in aba) >= 0.95 * total
    assert len({t.counters["gen_tokens"] for t in aba}) > 1


def test_empty_lake_detector():
    d = EmptyLakeDetector()
    d.observe("lake", 0, 8)
    assert d.status("lake") == "ok"                  # 8 failures are not enough evidence for p < 0.02
    for _ in range(20):
        d.observe("lake", 0, 16)
    assert d.status("lake") == "empty"
    d.observe("mixed", 3, 16)
    for _ in range(20):
        d.observe("full", 16, 16)
    assert d.flagged() == ["lake", "full"]
    with pytest.raises(ValueError):
        d.observe("x", 5, 3)
