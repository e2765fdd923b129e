"""The white-box forker: forked branches equal a full re-encode, parents stay untouched, batches are invariant,
the counters add up exactly, and recompute mode gives the same tokens."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentmill.lm import load_lm  # noqa: E402
from agentmill.lm.fork import BranchRequest, StopSpec, TokenCounters, WhiteBoxForker, stream_rng  # noqa: E402
from agentmill.lm.base import LMError  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return load_lm("scripted:whitebox")


def _root(i, n=12):
    return BranchRequest(None, 0, np.zeros(0, np.int32), i, n)


def _grow(fk, ids, key=(1, 2, 3)):
    t = fk.start_tree(ids, key)
    roots = fk.expand(t, [_root(0), _root(1)], 1.0)
    leaf0 = roots[0].token_ids
    reqs = [BranchRequest(0, p, leaf0[:p], 10 + p, 10) for p in (1, 4, 7)]
    return t, roots, reqs, fk.expand(t, reqs, 1.0)


def test_forked_logprobs_equal_full_reencode(lm):
    ids = lm.render("add 12 and 30")
    fk = WhiteBoxForker(lm)
    t, roots, reqs, conts = _grow(fk, ids)
    for r, c in zip(reqs, conts):
        full = ids + [int(x) for x in r.prefix_ids] + [int(x) for x in c.token_ids]
        lp = torch.log_softmax(lm.forward(torch.tensor([full])).logits[0].double(), -1)
        start = len(ids) + r.pos
        ref = np.array([lp[start - 1 + j, int(tok)].item() for j, tok in enumerate(c.token_ids)])
        assert np.abs(ref - c.logprobs).max() < 1e-4
        # entropies are of the sampling distribution at each position
        p = lp[start - 1].exp()
        assert abs(c.branch_entropy + float((p * lp[start - 1]).sum())) < 1e-4


def test_parent_cache_unchanged_by_children(lm):
    ids = lm.render("hello")
    fk = WhiteBoxForker(lm)
    t = fk.start_tree(ids, (0,))
    fk.expand(t, [_root(0)], 1.0)
    stored = fk._get(t, 0)
    before = [x.clone() for x in (stored.emb, stored.keep)]
    leaf = t.leaf_tokens[0]
    fk.expand(t, [BranchRequest(0, p, leaf[:p], 5 + p, 6) for p in (1, 3)], 1.0)
    assert torch.equal(before[0], stored.emb) and torch.equal(before[1], stored.keep)


def test_batch_and_single_decoding_agree(lm):
    ids = lm.render("batch invariance")
    fk = WhiteBoxForker(lm)
    t, roots, reqs, conts = _grow(fk, ids)
    for r, c in zip(reqs, conts):
        alone = fk.expand(t, [r], 1.0)[0]
        assert np.array_equal(alone.token_ids, c.token_ids)
        assert np.abs(alone.logprobs - c.logprobs).max(initial=0) <= 1e-4


def test_counters_add_up_exactly(lm):
    ids = lm.render("count me")
    fk = WhiteBoxForker(lm)
    t, roots, reqs, conts = _grow(fk, ids)
    c = fk.end_tree(t)
    allc = roots + conts
    fed = sum(len(x.token_ids) - (x.finish != "eos") for x in allc)
    gen = sum(len(x.token_ids) + (x.finish == "eos") for x in allc)
    assert c.gen_tokens == gen and c.fed_tokens == fed
    assert c.refeed_tokens == c.forks == len(reqs) and c.recompute_tokens == 0
    assert c.forward_tokens == len(ids) + fed + len(reqs)


def test_recompute_mode_matches_fork_mode(lm):
    ids = lm.render("recompute")
    _, _, _, a = _grow(WhiteBoxForker(lm), ids)
    fk = WhiteBoxForker(lm, mode="recompute")
    t, _, reqs, b = _grow(fk, ids)
    assert all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a, b))
    assert fk.end_tree(t).recompute_tokens == sum(len(ids) + r.pos - 1 for r in reqs)
    assert not fk.supports_prefix_sharing


def test_evicted_cache_is_recomputed_and_counted(lm):
    ids = lm.render("evict")
    fk = WhiteBoxForker(lm, max_cache_bytes=1)   # keeps only the newest leaf
    t, roots, reqs, conts = _grow(fk, ids)
    ref = _grow(WhiteBoxForker(lm), ids)[3]
    assert all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(conts, ref))
    assert fk.end_tree(t).recompute_tokens > 0


def test_stop_spec_and_rng_streams():
    s = StopSpec(stop=("END",), stop_regex=r"Answer:\s*\d+\n")
    assert s.hit("xx END") and s.hit("Answer: 12\n") and not s.hit("Answer: 12")
    a = stream_rng((1, 2), 3).random(4)
    assert np.array_equal(a, stream_rng((1, 2), 3).random(4)) and not np.array_equal(a, stream_rng((1, 2), 4).random(4))
    assert TokenCounters(prefill_tokens=3, fed_tokens=4, refeed_tokens=1).forward_tokens == 8


def test_bad_requests_fail_clearly(lm):
    with pytest.raises(ValueError, match="pos"):
        BranchRequest(0, 2, np.zeros(1, np.int32), 0, 4)
    with pytest.raises(ValueError, match="root"):
        BranchRequest(None, 1, np.zeros(1, np.int32), 0, 4)
    with pytest.raises(LMError, match="black box"):
        WhiteBoxForker(load_lm("scripted:echo"))
    fk = WhiteBoxForker(lm)
    t = fk.start_tree(lm.render("x"), (0,))
    fk.expand(t, [_root(0, 5)], 1.0)
    with pytest.raises(ValueError, match="does not match"):
        fk.expand(t, [BranchRequest(0, 2, np.array([999, 998], np.int32), 1, 4)], 1.0)
    with pytest.raises(ValueError, match="temperature"):
        fk.expand(t, [_root(1)], 0.0)


@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_fork_equals_reencode_and_batch_invariant(smol):
    smollm2 = smol
    ids = smollm2.encode("Q: 12 + 30 = ")
    fk = WhiteBoxForker(smollm2)
    t, roots, reqs, conts = _grow(fk, ids)
    for r, c in zip(reqs, conts):
        full = ids + [int(x) for x in r.prefix_ids] + [int(x) for x in c.token_ids]
        lp = torch.log_softmax(smollm2.forward(torch.tensor([full])).logits[0].double(), -1)
        start = len(ids) + r.pos
        ref = np.array([lp[start - 1 + j, int(tok)].item() for j, tok in enumerate(c.token_ids)])
        assert np.abs(ref - c.logprobs).max() < 1e-4
        alone = fk.expand(t, [r], 1.0)[0]
        assert np.array_equal(alone.token_ids, c.token_ids)
    cnt = fk.end_tree(t)
    assert cnt.forward_tokens == len(ids) + cnt.fed_tokens + cnt.refeed_tokens


def test_throughput_probe_reports_every_batch(lm):
    from agentmill.lm.throughput import throughput_probe

    class Enc:
        def __getattr__(self, k):
            return getattr(lm, k)

        def encode(self, text):
            return lm.render(text)

    out = throughput_probe(Enc(), prefill_len=16, batches=(1, 2), steps=2)
    assert out["prefill_tok_s"] > 0 and out["decode_tok_s_b1"] > 0 and out["decode_tok_s_b2"] > 0
