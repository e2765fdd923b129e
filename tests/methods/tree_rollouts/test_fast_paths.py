"""The vectorised hot paths of the synthetic tree runs equal their plain-loop definitions bit for bit.

Why: uucb_grid and tree_synth were sped up by array expressions and running totals; their claims are only
unchanged if every number is identical, so each fast path is checked here against the loop it replaced.
"""

import math

import numpy as np

from agentmill.lm.fork import BranchRequest, stream_rng
from agentmill.methods.tree_rollouts.config import TreeConfig, UUCBConfig
from agentmill.methods.tree_rollouts.sampler import build_tree, build_view
from agentmill.methods.tree_rollouts.selectors import (
    UUCB,
    CandidateView,
    make_selector,
    value_term,
)
from agentmill.methods.tree_rollouts.synthetic import (
    CORRECT,
    FILLER_ENTROPY,
    WRONG,
    SyntheticChainLM,
    _binary_entropy,
    make_pool,
)

LM = SyntheticChainLM()


def _loop_value_term(view: CandidateView, p_hi: np.ndarray, p_lo: np.ndarray) -> np.ndarray:
    out = np.zeros(len(view.n))
    for i, chain in enumerate(view.anc_groups):
        g = np.asarray(chain, dtype=int)
        out[i] = float((view.group_w[g] * (view.group_F[g] * p_hi[i] + view.group_S[g] * (1.0 - p_lo[i]))).sum())
    return out


def _loop_expand(q: np.ndarray, key: tuple[int, ...], req: BranchRequest) -> tuple[np.ndarray, ...]:
    """The per-token loop of SyntheticChainLM.expand before vectorisation."""
    rng = stream_rng(key, req.expansion_id)
    erred = bool((np.asarray(req.prefix_ids)[:: LM.tps] == WRONG).any())
    n = min(req.max_new_tokens, LM.length - req.pos)
    toks, ents, lps = np.empty(n, np.int32), np.empty(n, np.float32), np.zeros(n, np.float32)
    for j in range(n):
        pos = req.pos + j
        if pos % LM.tps == 0:
            qi = q[pos // LM.tps]
            if erred:
                toks[j], ents[j] = WRONG, 0.0
            else:
                ok = rng.random() < qi
                toks[j] = CORRECT if ok else WRONG
                ents[j] = _binary_entropy(qi)
                lps[j] = math.log(qi if ok else 1 - qi) if 0 < qi < 1 else 0.0
                erred = not ok
        else:
            toks[j], ents[j] = LM.filler(pos), FILLER_ENTROPY
    return toks, lps, ents


def test_expand_equals_the_token_loop() -> None:
    q = make_pool("hard", 1, 7)[0]
    for pos in range(0, LM.length, 7):
        for max_new in (1, 4, 13, LM.length):
            for bad_prefix in (False, True):
                prefix = np.array([CORRECT if p % LM.tps == 0 else 3 for p in range(pos)], np.int32)
                if bad_prefix and pos:
                    prefix[0] = WRONG
                req = BranchRequest(0 if pos else None, pos, prefix, 1000 * pos + max_new, max_new)
                tree = LM.start_tree(q, (3, 5))
                got = LM.expand(tree, [req])[0]
                want = _loop_expand(q, (3, 5), req)
                for a, b in zip((got.token_ids, got.logprobs, got.entropies), want):
                    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_value_term_equals_the_candidate_loop() -> None:
    rng = np.random.default_rng(0)
    for beta in (0.0, 0.25):
        for i, q in enumerate(make_pool("mix", 6, 11)):
            tree = build_tree(q, LM, LM.verify, make_selector("uucb", beta=beta), TreeConfig(budget_tokens=600,
                              max_new_tokens=LM.length), tree_key=(9, i), branch_policy=LM.branch_points)
            cfg = UUCBConfig(beta=beta)
            view = build_view(tree, tree.candidates, cfg, tree.candidates[-2:])
            p_hi, p_lo = rng.random(len(view.n)), rng.random(len(view.n))
            for a, b in ((p_hi, p_lo), (view.mu, view.mu)):
                assert value_term(view, a, b).tobytes() == _loop_value_term(view, a, b).tobytes()
            t = UUCB(cfg).terms(view)
            assert UUCB.combine(t).tobytes() == UUCB(cfg).scores(view).tobytes()


def test_running_mean_leaf_length_and_group_nodes_match_a_rescan() -> None:
    tree = build_tree(make_pool("hard", 1, 3)[0], LM, LM.verify, make_selector("random"),
                      TreeConfig(budget_tokens=500, max_new_tokens=LM.length), tree_key=(1,),
                      branch_policy=LM.branch_points)
    assert tree.mean_leaf_length() == float(np.mean([len(lf.tokens) for lf in tree.leaves]))
    assert tree.group_nodes() == [tree.root] + [nd for nd in tree.nodes()[1:] if len(nd.children) >= 2]
    assert tree.n_nodes == len(tree.nodes())


def test_decode_matches_the_character_loop() -> None:
    ids = np.array([CORRECT, WRONG, 3, 0, CORRECT, 15], np.int32)
    assert LM.decode(ids) == "".join("." if i == CORRECT else "x" if i == WRONG else "_" for i in ids) == ".x__._"
    assert LM.decode([CORRECT, 7]) == "._" and LM.decode(np.zeros(0, np.int32)) == ""
