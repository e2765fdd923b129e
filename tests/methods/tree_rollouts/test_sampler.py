"""Tree sampler on the synthetic twin: budgets, determinism, caps, UUCB terms by hand, selectors' behaviour."""

import math

import numpy as np
import pytest

from agentmill.lm.fork import BranchRequest
from agentmill.methods.tree_rollouts.config import TreeConfig, UUCBConfig
from agentmill.methods.tree_rollouts.sampler import RolloutLog, build_tree, build_view, sample_independent, tree_metrics
from agentmill.methods.tree_rollouts.selectors import UUCB, CandidateView, entropy_term, make_selector
from agentmill.methods.tree_rollouts.synthetic import CORRECT, WRONG, SyntheticChainLM, make_pool
from agentmill.methods.tree_rollouts.tree import Reward, RolloutTree

LM = SyntheticChainLM()
CFG = TreeConfig(budget_tokens=800, max_new_tokens=LM.length)


def _tree(q, sel="uucb", key=(0,), cfg=CFG, **kw):
    return build_tree(q, LM, LM.verify, make_selector(sel), cfg, tree_key=key, branch_policy=LM.branch_points, **kw)


def test_synthetic_chain_semantics():
    q = np.array([1.0] * 9 + [0.0])
    t = LM.start_tree(q, (1,))
    c = LM.expand(t, [BranchRequest(None, 0, np.zeros(0, np.int32), 0, 100)])[0]
    assert len(c.token_ids) == 100 and c.token_ids[0] == CORRECT and c.token_ids[90] == WRONG
    assert LM.verify(c.token_ids).value == 0.0
    assert LM.oracle_p(q, c.token_ids[:50]) == 0.0
    q2 = np.full(10, 0.5)
    assert LM.oracle_p(q2, np.zeros(0)) == pytest.approx(0.5**10)
    assert LM.oracle_p(q2, np.array([CORRECT] + [5] * 9 + [CORRECT])) == pytest.approx(0.5**8)
    assert c.entropies[1] == pytest.approx(0.05) and c.branch_entropy == 0.0   # q = 1: no uncertainty


def test_pools_have_the_documented_pass_rates():
    hard = make_pool("hard", 2000, 1)
    assert np.mean([np.prod(q) for q in hard]) == pytest.approx(0.028, abs=0.004)
    assert all(np.prod(q) == 0 for q in make_pool("empty", 50, 1))
    assert np.prod(make_pool("easy", 1, 1)[0]) == pytest.approx(0.99**10)
    with pytest.raises(ValueError):
        make_pool("nope", 1, 1)


def test_budget_is_respected_and_trees_are_deterministic():
    q = make_pool("hard", 1, 3)[0]
    a, b = _tree(q, key=(1, 2)), _tree(q, key=(1, 2))
    assert [lf.tokens.tolist() for lf in a.leaves] == [lf.tokens.tolist() for lf in b.leaves]
    assert a.counters["gen_tokens"] <= 800
    # prefix sharing accounting is exact: forward = prompt + fed + refeed
    c = a.counters
    assert c["forward_tokens"] == LM.prompt_tokens + c["fed_tokens"] + c["refeed_tokens"]


def test_independent_selector_matches_standalone_sampler():
    q = make_pool("hard", 1, 4)[0]
    tree = _tree(q, "independent", key=(9,))
    alone = sample_independent(q, LM, LM.verify, len(tree.leaves), tree_key=(9,), max_new_tokens=100)
    assert len(tree.leaves) == 8
    assert all(np.array_equal(lf.tokens, t) for lf, (t, _) in zip(tree.leaves, alone))
    assert all(lf.new_from == 0 for lf in tree.leaves)


def test_uucb_beats_independent_on_a_small_hard_pool():
    pool = make_pool("hard", 60, 1000)
    ind = tree_metrics([_tree(q, "independent", key=(i,)) for i, q in enumerate(pool)])
    uu = tree_metrics([_tree(q, "uucb", key=(i,)) for i, q in enumerate(pool)])
    assert uu["nz_leaves_per_1k"] > 1.5 * ind["nz_leaves_per_1k"]
    assert abs(uu["gen_tokens"] - ind["gen_tokens"]) <= 0.02 * ind["gen_tokens"]


def test_max_leaves_and_expansion_caps():
    q = make_pool("hard", 1, 5)[0]
    t = _tree(q, "random", cfg=TreeConfig(budget_tokens=None, max_leaves=8, max_new_tokens=100, wave=3))
    assert len(t.leaves) == 8
    t2 = _tree(q, "random", cfg=TreeConfig(budget_tokens=10**6, max_new_tokens=100, max_expansions=5))
    assert t2.counters["expansions"] == 5
    with pytest.raises(ValueError, match="seed rollouts"):
        _tree(q, cfg=TreeConfig(budget_tokens=1, seed_rollouts=2, max_new_tokens=100))


def test_verifier_errors_make_leaves_unscorable_not_crashes():
    q = make_pool("hard", 1, 6)[0]

    def bad(tokens, text):
        raise RuntimeError("boom")

    t = build_tree(q, LM, bad, make_selector("uucb"), CFG, tree_key=(0,), branch_policy=LM.branch_points)
    assert t.leaves and all(lf.reward.value is None for lf in t.leaves)
    assert t.leaves[0].reward.reason == "verifier_error: RuntimeError" and t.root.n == 0


def test_rollout_log_has_one_line_per_leaf(tmp_path):
    q = make_pool("hard", 1, 7)[0]
    with RolloutLog(tmp_path / "r.jsonl", "run1") as log:
        t = _tree(q, log=log, prompt_key="p0")
    import json

    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(rows) == len(t.leaves) and rows[0]["run_id"] == "run1" and rows[0]["prompt_id"] == "p0"
    assert {"branch_pos", "uucb_terms", "rng_key", "reward", "gen_tokens"} <= set(rows[0])


def test_uucb_terms_by_hand():
    """Root only, two failed leaves: mu = (1+0)/(1+1+2) = 0.25, u = c*sqrt(ln 3 / 3); F_root = 1."""
    view = CandidateView(n=np.array([2.0]), n_real=np.array([2.0]), k=np.array([0.0]), mu=np.array([0.25]),
                         entropy=np.array([0.7]), depth=np.array([0]), N=2.0, anc_groups=[[0]],
                         group_w=np.array([1.0]), group_F=np.array([1.0]), group_S=np.array([0.0]))
    cfg = UUCBConfig()
    t = UUCB(cfg).terms(view)
    u = 0.25 * math.sqrt(math.log(3) / 3)
    assert t["value"][0] == pytest.approx(0.25)
    assert t["explore"][0] == pytest.approx(u)
    assert t["entropy"][0] == pytest.approx(0.5 * (1 - math.exp(-0.7)))
    assert entropy_term(np.array([np.nan]))[0] == 0.0


def test_hierarchical_posterior_and_virtual_updates():
    tree = RolloutTree("p", branch_policy=lambda toks, ents, dec: [2])
    for r in (0.0, 0.0):
        tree.add_leaf(np.array([1, 2, 3, 4]) if r == 0 else np.array([1, 2, 9, 9]), new_from=0, parent_leaf=None,
                      logprobs=np.zeros(4), entropies=np.full(4, 0.3), branch_entropy=0.3, reward=Reward(r), finish="length")
    cands = tree.candidates
    view = build_view(tree, cands, UUCBConfig(), [])
    root_mu = (1 + 0) / (2 + 2)
    assert view.mu[0] == pytest.approx(root_mu)
    assert view.mu[1] == pytest.approx((2 * root_mu + 0) / (2 + 2))     # prefix [1, 2]: n = 2, k = 0
    pending = build_view(tree, cands, UUCBConfig(), [cands[1]])
    assert pending.n[1] == 3 and pending.n[0] == 3 and pending.n_real[1] == 2
    assert pending.group_F[0] == pytest.approx(1 - view.mu[1])


def test_make_selector_rejects_unknowns_and_greedy_needs_oracle():
    with pytest.raises(ValueError, match="unknown selector"):
        make_selector("best")
    with pytest.raises(TypeError):
        make_selector("uucb", bogus=1)
    q = make_pool("hard", 1, 8)[0]
    with pytest.raises(ValueError, match="oracle"):
        _tree(q, "greedy")
    t = _tree(q, "greedy", oracle=lambda pre: LM.oracle_p(q, pre))
    assert len(t.leaves) > 2


def test_waves_never_overspend_the_budget():
    """Each pick of a wave is capped at its expected cost plus a share of the slack (not the whole remainder);
    leaves of variable length (EOS) are what could overshoot."""
    pytest.importorskip("torch")
    from agentmill.lm import load_lm
    from agentmill.lm.fork import WhiteBoxForker

    forker = WhiteBoxForker(load_lm("scripted:whitebox"))
    cfg = TreeConfig(budget_tokens=60, wave=4, max_new_tokens=12)
    for i in range(6):
        t = build_tree(f"prompt {i}", forker, lambda toks, text: Reward(float(len(toks) % 2)), make_selector("random"),
                       cfg, tree_key=(i,), branch_policy=lambda toks, ents, dec: list(range(1, len(toks))))
        assert t.counters["gen_tokens"] <= 60 and len(t.leaves) > 4
